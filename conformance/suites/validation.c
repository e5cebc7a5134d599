/* validation.<CLAUSE>.every_call: the verdicts of the validation layer
 * (validate_*.c). They run after every other test of the plugin, so they
 * cover every call those tests made, in this worker and in the workers
 * before it (the supervisor hands their reports on). */
#include "suites.h"
#include "../validate.h"

#define VERDICT(fn, clause)                                    \
    conf_result fn(conf_env *env, char *msg, size_t cap)       \
    {                                                          \
        (void)env;                                             \
        return conf_validate_verdict(clause, msg, cap);        \
    }

VERDICT(conf_val_prb1, "PRB-1")
VERDICT(conf_val_prb2, "PRB-2")
VERDICT(conf_val_abi7, "ABI-7")
VERDICT(conf_val_abi9, "ABI-9")
VERDICT(conf_val_tok3, "TOK-3")
VERDICT(conf_val_tok6, "TOK-6")
VERDICT(conf_val_tok7, "TOK-7")
VERDICT(conf_val_tok8, "TOK-8")
VERDICT(conf_val_tok9, "TOK-9")
VERDICT(conf_val_tok1, "TOK-1")
VERDICT(conf_val_tok12, "TOK-12")
VERDICT(conf_val_tok13, "TOK-13")
VERDICT(conf_val_log1, "LOG-1")
VERDICT(conf_val_log4, "LOG-4")
VERDICT(conf_val_log6, "LOG-6")
VERDICT(conf_val_cch4, "CCH-4")
VERDICT(conf_val_cch5, "CCH-5")
VERDICT(conf_val_cch6, "CCH-6")
VERDICT(conf_val_cch9, "CCH-9")
VERDICT(conf_val_cch10, "CCH-10")
VERDICT(conf_val_str1, "STR-1")
VERDICT(conf_val_str3, "STR-3")
VERDICT(conf_val_str5, "STR-5")
VERDICT(conf_val_str9, "STR-9")
VERDICT(conf_val_err1, "ERR-1")
VERDICT(conf_val_err4, "ERR-4")
VERDICT(conf_val_err5, "ERR-5")
