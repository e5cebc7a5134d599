/* The models `inferlab serve --model NAME=FILE` serves (serve_models.h). */
#include "serve_models.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A served name: what /v1/models lists and a request's "model" says. */
#define NAME_MAX_LEN 63

bool ilab_serve_model_is_named(const char *arg)
{
    const char *eq = strchr(arg, '='), *slash = strchr(arg, '/');
    return eq && (!slash || eq < slash);
}

static bool name_ok(const char *name, size_t len)
{
    if (len == 0 || len > NAME_MAX_LEN)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-' || c == ':';
        if (!ok)
            return false;
    }
    return true;
}

/* Readable as a regular file now: a typo fails here, named, not later in a worker. */
static bool file_readable(const char *what, const char *arg, const char *file)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "inferlab serve: %s '%s': cannot read the model file '%s': %s\n",
                what, arg, file, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return false;
    }
    close(fd);
    return true;
}

/* One NAME=FILE into slot i; -1 or the exit code. */
static int open_one(const char *what, const char *arg, size_t i, const char *plugin,
                    ilab_settings_builder_fn build, void *ctx, ilab_serve_models *out)
{
    const char *eq = strchr(arg, '=');
    size_t len = (size_t)(eq - arg);
    if (!name_ok(arg, len)) {
        fprintf(stderr, "inferlab serve: %s '%s': the name '%.*s' is not 1-%d letters, "
                        "digits or ._:-\n", what, arg, (int)len, arg, NAME_MAX_LEN);
        return 2;
    }
    for (size_t j = 0; j < i; j++)
        if (strlen(out->models[j].name) == len && !strncmp(out->models[j].name, arg, len)) {
            fprintf(stderr, "inferlab serve: %s '%s': the name '%.*s' is given twice\n",
                    what, arg, (int)len, arg);
            return 2;
        }
    const char *file = eq + 1;
    if (!file_readable(what, arg, file))
        return 2;
    char *name = strndup(arg, len);
    ilab_settings *s = &out->settings[i];
    ilab_settings_init(s);
    out->n = i + 1; /* freed from here on */
    out->models[i] = (ilab_serve_model){.name = name, .plugin = plugin, .settings = s};
    char err[1024] = "";
    if (!name)
        snprintf(err, sizeof err, "out of memory");
    else if (build(ctx, s, err, sizeof err) != ILAB_OK)
        ; /* err says why */
    else if (ilab_settings_set_model(s, plugin, file) != ILAB_OK)
        snprintf(err, sizeof err, "setting %s.model: out of memory", plugin);
    else
        return -1;
    fprintf(stderr, "inferlab serve: %s '%s': %s\n", what, arg, err);
    return 2;
}

int ilab_serve_models_open(const char *what, const char *const *args, size_t n,
                           const char *plugin, ilab_settings_builder_fn build, void *ctx,
                           ilab_serve_models *out)
{
    memset(out, 0, sizeof *out);
    out->models = calloc(n ? n : 1, sizeof *out->models);
    out->settings = calloc(n ? n : 1, sizeof *out->settings);
    if (!out->models || !out->settings) {
        fprintf(stderr, "inferlab serve: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = open_one(what, args[i], i, plugin, build, ctx, out);
        if (rc >= 0)
            return rc;
    }
    return -1;
}

void ilab_serve_models_free(ilab_serve_models *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free((char *)m->models[i].name);
        ilab_settings_free(&m->settings[i]);
    }
    free(m->models);
    free(m->settings);
    memset(m, 0, sizeof *m);
}
