/* inferlab SDK — everything a backend author includes. */
#ifndef INFERLAB_INFERLAB_H
#define INFERLAB_INFERLAB_H

#include "inferlab/status.h"
#include "inferlab/host.h"
#include "inferlab/generate.h"
#include "inferlab/backend.h"
#include "inferlab/plugin.h"
#include "inferlab/last_error.h"
#include "inferlab/struct_size.h"

#endif
