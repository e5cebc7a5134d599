/* ABI sweeps and static checks (ABI-1, ABI-3, ABI-4, ABI-6, PRB-1):
 *  - the ELF dynamic symbol table read from the file, without loading it:
 *    exactly one exported symbol; no undefined weak symbol left unresolved;
 *  - every struct_size from 0 to past the current one, for the structs the
 *    plugin writes (model_info) and reads (batch items, the host table);
 *  - the manifest against model_info(); probe() called repeatedly. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "suites.h"

/* ---- the ELF dynamic symbol table ---------------------------------------- */

typedef struct elf_view {
    const unsigned char *base;
    size_t size;
    const Elf64_Sym *syms;
    size_t n_syms;
    const char *strtab;
    size_t strtab_size;
} elf_view;

static bool elf_open(const char *path, elf_view *v, char *msg, size_t cap)
{
    memset(v, 0, sizeof *v);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        CONF_MSG("%s: cannot read it as an ELF file", path);
        if (fd >= 0)
            close(fd);
        return false;
    }
    v->size = (size_t)st.st_size;
    v->base = mmap(NULL, v->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (v->base == MAP_FAILED) {
        v->base = NULL;
        CONF_MSG("%s: mmap failed", path);
        return false;
    }
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)v->base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > v->size) {
        CONF_MSG("%s: not a well-formed 64-bit ELF shared object", path);
        return false;
    }
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(v->base + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > v->size || str->sh_offset + str->sh_size > v->size)
            break;
        v->syms = (const Elf64_Sym *)(v->base + sh[i].sh_offset);
        v->n_syms = sh[i].sh_size / sizeof(Elf64_Sym);
        v->strtab = (const char *)(v->base + str->sh_offset);
        v->strtab_size = str->sh_size;
        return true;
    }
    CONF_MSG("%s: no dynamic symbol table", path);
    return false;
}

static void elf_close(elf_view *v)
{
    if (v->base)
        munmap((void *)v->base, v->size);
}

static const char *sym_name(const elf_view *v, const Elf64_Sym *s)
{
    return s->st_name < v->strtab_size ? v->strtab + s->st_name : "?";
}

/* Undefined weak references the C runtime's start files leave in every
 * shared object; none of them is called unless present. */
static bool runtime_weak(const char *name)
{
    static const char *const known[] = {"__gmon_start__", "_ITM_deregisterTMCloneTable",
                                        "_ITM_registerTMCloneTable", "__cxa_finalize",
                                        "_Jv_RegisterClasses", "__deregister_frame_info",
                                        "__register_frame_info", NULL};
    for (int i = 0; known[i]; i++)
        if (strcmp(name, known[i]) == 0)
            return true;
    return false;
}

/* ABI-1: the file exports exactly one dynamic symbol, the entry. */
conf_result conf_abi1_one_export(conf_env *env, char *msg, size_t cap)
{
    elf_view v;
    if (!elf_open(env->path, &v, msg, cap)) {
        elf_close(&v);
        return CONF_FAIL;
    }
    int exported = 0;
    char names[512] = "";
    for (size_t i = 1; i < v.n_syms; i++) {
        const Elf64_Sym *s = &v.syms[i];
        int bind = ELF64_ST_BIND(s->st_info), vis = ELF64_ST_VISIBILITY(s->st_other);
        if (s->st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE))
            continue;
        if (vis != STV_DEFAULT && vis != STV_PROTECTED)
            continue;
        if (s->st_shndx == SHN_ABS && s->st_size == 0 && ELF64_ST_TYPE(s->st_info) == STT_OBJECT)
            continue; /* a version-node symbol the linker adds for a named version script */
        exported++;
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", sym_name(&v, s));
    }
    elf_close(&v);
    CONF_CHECK(exported == 1 && strcmp(names, ILAB_PLUGIN_ENTRY_SYMBOL) == 0,
               "the dynamic symbol table exports %d symbol(s) (%s); want exactly one, %s (link with "
               "the SDK's plugin.map)", exported, names, ILAB_PLUGIN_ENTRY_SYMBOL);
    return CONF_PASS;
}

/* ABI-4: an undefined weak symbol is not caught by RTLD_NOW; once loaded it
 * must resolve (or the plugin calls through NULL). */
conf_result conf_abi4_weak_resolved(conf_env *env, char *msg, size_t cap)
{
    elf_view v;
    if (!elf_open(env->path, &v, msg, cap)) {
        elf_close(&v);
        return CONF_FAIL;
    }
    void *h = dlopen(env->path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        elf_close(&v);
        CONF_MSG("dlopen: %s", dlerror());
        return CONF_FAIL;
    }
    conf_result r = CONF_PASS;
    for (size_t i = 1; i < v.n_syms && r == CONF_PASS; i++) {
        const Elf64_Sym *s = &v.syms[i];
        if (s->st_shndx != SHN_UNDEF || ELF64_ST_BIND(s->st_info) != STB_WEAK)
            continue;
        const char *name = sym_name(&v, s);
        if (runtime_weak(name))
            continue;
        dlerror();
        if (!dlsym(h, name)) {
            CONF_MSG("the undefined weak symbol '%s' does not resolve once loaded (RTLD_NOW does not "
                     "catch weak references: calling it would jump to NULL)", name);
            r = CONF_FAIL;
        }
    }
    dlclose(h);
    elf_close(&v);
    return r;
}

/* ---- struct_size sweeps ---------------------------------------------------- */

/* ABI-3: model_info() at every struct_size: smaller than ABI 1.0's is
 * ABI_MISMATCH and writes nothing; larger is OK and writes nothing past the
 * plugin's own size; never a byte past the caller's struct_size. */
conf_result conf_abi3_model_info_sizes(conf_env *env, char *msg, size_t cap)
{
    enum { EXTRA = 64 };
    union {
        ilab_model_info_t info;
        unsigned char bytes[sizeof(ilab_model_info_t) + EXTRA];
    } u;
    for (size_t size = 0; size <= sizeof(ilab_model_info_t) + EXTRA; size++) {
        memset(&u, 0xA5, sizeof u);
        u.info.struct_size = (uint32_t)size;
        ilab_status st = env->api->model_info(env->be, &u.info);
        size_t limit = size < sizeof u.info ? size : sizeof u.info;
        if (size < ILAB_MODEL_INFO_SIZE_1_0) {
            CONF_CHECK(st == ILAB_ABI_MISMATCH,
                       "model_info() with struct_size %zu (< ABI 1.0's %u) returned %s, want ABI_MISMATCH",
                       size, ILAB_MODEL_INFO_SIZE_1_0, ilab_status_name(st));
            limit = size < sizeof(uint32_t) ? 0 : sizeof(uint32_t);
        } else {
            CONF_CHECK(st == ILAB_OK, "model_info() with struct_size %zu (>= ABI 1.0's %u) returned %s", size,
                       ILAB_MODEL_INFO_SIZE_1_0, ilab_status_name(st));
        }
        CONF_CHECK(u.info.struct_size == (uint32_t)size,
                   "model_info() with struct_size %zu changed struct_size to %u (it stays as the caller set it)",
                   size, (unsigned)u.info.struct_size);
        for (size_t i = limit > sizeof(uint32_t) ? limit : sizeof(uint32_t); i < sizeof u.bytes; i++)
            CONF_CHECK(u.bytes[i] == 0xA5, "model_info() with struct_size %zu wrote byte %zu (%s)", size, i,
                       size < ILAB_MODEL_INFO_SIZE_1_0 ? "it refused the struct: nothing may be written"
                                            : "past ABI 1.0's struct");
    }
    return CONF_PASS;
}

/* ABI-3: in a batch of up to 3 items, a non-zero byte past ABI 1.0's item
 * on any one item (not only the first) is ABI_MISMATCH and changes nothing. */
static bool item_tail_on_each_position(conf_env *env, char *msg, size_t cap)
{
    enum { N = 3 };
    int nb = env->m->max_batch < N ? env->m->max_batch : N;
    struct {
        ilab_batch_item_t item;
        unsigned char tail[8];
    } big[N];
    ilab_seq_t s[N] = {0};
    int32_t tok[N];
    conf_prompt_tokens(env, env->opt->seed + 42, tok, N);
    bool ok = true;
    for (int i = 0; i < nb && ok; i++)
        ok = env->api->seq_create(env->be, &s[i]) == ILAB_OK;
    for (int bad = 0; ok && bad < nb; bad++) {
        const ilab_batch_item_t *items[N];
        memset(big, 0, sizeof big);
        for (int i = 0; i < nb; i++) {
            big[i].item = (ilab_batch_item_t){.struct_size = (uint32_t)sizeof big[i], .seq = s[i],
                                              .tokens = &tok[i], .n_tokens = 1};
            items[i] = &big[i].item;
        }
        big[bad].tail[3] = 1;
        ilab_status st = env->api->eval(env->be, items, (size_t)nb);
        int32_t total = 0;
        for (int i = 0; i < nb; i++) {
            int32_t len = 0;
            env->api->seq_length(env->be, s[i], &len);
            total += len;
        }
        if (st != ILAB_ABI_MISMATCH || total != 0) {
            CONF_MSG("eval() of %d items, item %d with struct_size %zu and a non-zero byte past ABI 1.0's "
                     "%zu, returned %s and appended %d token(s); want ABI_MISMATCH and nothing", nb, bad,
                     sizeof big[bad], sizeof big[bad].item, ilab_status_name(st), total);
            ok = false;
        }
    }
    for (int i = 0; i < nb; i++)
        if (s[i])
            env->api->seq_free(env->be, s[i]);
    return ok;
}

/* ABI-3: a batch item smaller than ABI 1.0's is refused with ABI_MISMATCH
 * and changes nothing; a larger one with a zero tail is an ordinary item. */
conf_result conf_abi3_item_sizes(conf_env *env, char *msg, size_t cap)
{
    CONF_SKIP_UNLESS(env->m->logits == ILAB_LOGITS_FULL, "logits: full");
    int32_t tok[2];
    conf_prompt_tokens(env, env->opt->seed + 40, tok, 2);
    float *want = malloc((size_t)env->info.vocab_size * sizeof *want);
    float *got = malloc((size_t)env->info.vocab_size * sizeof *got);
    conf_result r = CONF_FAIL;
    ilab_seq_t s = 0;
    if (conf_fresh_logits(env, tok, 2, want) != ILAB_OK || env->api->seq_create(env->be, &s) != ILAB_OK) {
        CONF_MSG("seq_create/eval failed");
        goto out;
    }
    struct {
        ilab_batch_item_t item;
        unsigned char tail[32];
    } big;
    for (size_t size = 0; size < sizeof big; size += 4) {
        memset(&big, 0, sizeof big);
        big.item = (ilab_batch_item_t){.struct_size = (uint32_t)size, .seq = s, .tokens = tok, .n_tokens = 2,
                                       .logits = got};
        const ilab_batch_item_t *items[1] = {&big.item};
        ilab_status st = env->api->eval(env->be, items, 1);
        int32_t len = -1;
        env->api->seq_length(env->be, s, &len);
        if (size < ILAB_BATCH_ITEM_SIZE_1_0) {
            if (st != ILAB_ABI_MISMATCH || len != 0) {
                CONF_MSG("eval() of an item with struct_size %zu (< ABI 1.0's %u) returned %s and left "
                         "length %d; want ABI_MISMATCH and 0", size, ILAB_BATCH_ITEM_SIZE_1_0, ilab_status_name(st), len);
                goto out;
            }
            continue;
        }
        if (st != ILAB_OK || len != 2) {
            CONF_MSG("eval() of an item with struct_size %zu (ABI 1.0's is %u; the tail is zero) returned "
                     "%s, length %d", size, ILAB_BATCH_ITEM_SIZE_1_0, ilab_status_name(st), len);
            goto out;
        }
        char what[96];
        snprintf(what, sizeof what, "item with struct_size %zu", size);
        if (!conf_logits_close(got, want, env->info.vocab_size, what, msg, cap))
            goto out;
        if (env->m->cache_truncate)
            env->api->seq_truncate(env->be, s, 0);
        else {
            env->api->seq_free(env->be, s);
            s = 0;
            if (env->api->seq_create(env->be, &s) != ILAB_OK)
                goto out;
        }
    }
    r = item_tail_on_each_position(env, msg, cap) ? CONF_PASS : CONF_FAIL;
out:
    if (s)
        env->api->seq_free(env->be, s);
    free(want);
    free(got);
    return r;
}

static int trap_calls;

static uint64_t trap_now_ns(const ilab_host_t *host)
{
    (void)host;
    trap_calls++;
    return 0;
}

static void trap_log(const ilab_host_t *host, ilab_log_level level, const char *plugin, const char *message)
{
    (void)host, (void)level, (void)plugin, (void)message;
    trap_calls++;
}

/* ABI-3: the plugin reads no member of the host table past its
 * struct_size: with a shorter table whose later members are traps, create,
 * use and destroy never call them (create may refuse with ABI_MISMATCH). */
conf_result conf_abi3_host_table_sizes(conf_env *env, char *msg, size_t cap)
{
    const size_t sizes[] = {offsetof(ilab_host_t, log), offsetof(ilab_host_t, now_ns)};
    for (size_t k = 0; k < 2; k++) {
        ilab_host_t host = *env->host;
        host.struct_size = (uint32_t)sizes[k];
        host.now_ns = trap_now_ns;
        if (k == 0)
            host.log = trap_log;
        trap_calls = 0;
        ilab_backend_t *b = NULL;
        char err[512] = "";
        ilab_status st = env->api->create(&host, env->config, env->n_config, err, sizeof err, &b);
        CONF_CHECK(st == ILAB_OK || st == ILAB_ABI_MISMATCH || st == ILAB_UNAVAILABLE,
                   "create() with a host table of struct_size %zu returned %s: %s", sizes[k],
                   ilab_status_name(st), err);
        if (st == ILAB_OK) {
            ilab_model_info_t info = {.struct_size = sizeof info};
            env->api->model_info(b, &info);
            if (env->m->logits == ILAB_LOGITS_FULL) {
                ilab_seq_t s = 0;
                int32_t tok = 0;
                if (env->api->seq_create(b, &s) == ILAB_OK) {
                    ilab_batch_item_t item = {.struct_size = sizeof item, .seq = s, .tokens = &tok, .n_tokens = 1};
                    const ilab_batch_item_t *items[1] = {&item};
                    env->api->eval(b, items, 1);
                    env->api->seq_free(b, s);
                }
            }
            env->api->destroy(b);
        }
        CONF_CHECK(trap_calls == 0,
                   "with a host table of struct_size %zu the plugin called %s past it %d time(s) (read no "
                   "member past the host's struct_size)", sizes[k], k == 0 ? "log()/now_ns()" : "now_ns()",
                   trap_calls);
    }
    return CONF_PASS;
}

/* ---- cross checks ------------------------------------------------------------ */

/* ABI-6: a non-zero manifest max_context equals model_info()'s. */
conf_result conf_abi6_manifest_matches_model(conf_env *env, char *msg, size_t cap)
{
    CONF_CHECK(env->m->max_context == 0 || env->m->max_context == env->info.max_context,
               "the manifest declares max_context %d, model_info() says %d", env->m->max_context,
               env->info.max_context);
    return CONF_PASS;
}

/* PRB-1: probe() answers every time, within 2 s, and the same way. */
conf_result conf_prb1_repeated(conf_env *env, char *msg, size_t cap)
{
    ilab_status first = ILAB_OK;
    for (int i = 0; i < 5; i++) {
        char reason[512];
        memset(reason, 0xA5, sizeof reason);
        double t0 = conf_now_seconds();
        ilab_status st = env->api->probe(env->host, env->config, env->n_config, reason, sizeof reason);
        double dt = conf_now_seconds() - t0;
        CONF_CHECK(dt <= 2.0, "probe() call %d took %.2f s (bound: 2 s)", i + 1, dt);
        CONF_CHECK(memchr(reason, '\0', sizeof reason), "probe() call %d left reason unterminated", i + 1);
        if (i == 0)
            first = st;
        CONF_CHECK(st == first, "probe() call %d returned %s, call 1 returned %s", i + 1, ilab_status_name(st),
                   ilab_status_name(first));
    }
    return CONF_PASS;
}
