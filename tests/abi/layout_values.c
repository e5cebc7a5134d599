/* The ABI layout table (sdk/abi/layout_table.h) as one array of numbers,
 * for a compiler targeting another architecture: it is compiled to assembly
 * (never linked or run) and check_layout.sh reads the numbers back. Each
 * number is stored plus one so that no element is zero and the assembler
 * lists every element on its own line. */
#include <stdalign.h>
#include <stddef.h>

#include "inferlab/backend.h"
#include "inferlab/generate.h"
#include "inferlab/host.h"
#include "inferlab/plugin.h"

#define ILAB_LAYOUT_STRUCT(type) sizeof(type) + 1, alignof(type) + 1,
#define ILAB_LAYOUT_MEMBER(type, name) offsetof(type, name) + 1, sizeof(((type *)0)->name) + 1,
#define ILAB_LAYOUT_VALUE(name) (unsigned long long)(name) + 1,

extern const unsigned long long ilab_layout_values[];
const unsigned long long ilab_layout_values[] = {
#include "layout_table.h"
};
