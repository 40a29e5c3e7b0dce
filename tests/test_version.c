/* One version everywhere: flexpoint_version(), the FLEXPOINT_VERSION_* macros of flexpoint.h,
 * the project(flexpoint VERSION x.y.z ...) line of the top-level CMakeLists.txt and the version
 * of the Python package (python/pyproject.toml) are the same string. */
#include "flexpoint.h"
#include "testutil.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* 1 if s is "MAJOR.MINOR.PATCH" (three non-empty runs of digits). */
static int is_semver(const char *s)
{
    for (int part = 0; part < 3; part++) {
        if (!isdigit((unsigned char)*s)) return 0;
        while (isdigit((unsigned char)*s)) s++;
        if (part < 2 && *s++ != '.') return 0;
    }
    return *s == '\0';
}

/* The first line of `path` that starts with `prefix` (after leading blanks): copies the text
 * after the prefix up to the first character of `stop` (or the line's end) into out. */
static int find_value(const char *path, const char *prefix, const char *stop, char *out,
                      size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, prefix, strlen(prefix)) != 0) continue;
        p += strlen(prefix);
        size_t n = strcspn(p, stop);
        if (n == 0 || n >= cap) break;
        memcpy(out, p, n);
        out[n] = '\0';
        found = 1;
    }
    fclose(f);
    return found;
}

int main(void)
{
    const char *v = flexpoint_version();
    CHECK(v != NULL && is_semver(v), "flexpoint_version() = '%s', want MAJOR.MINOR.PATCH",
          v ? v : "(null)");
    if (!v) return test_finish("test_version");

    char macros[64];
    snprintf(macros, sizeof macros, "%d.%d.%d", FLEXPOINT_VERSION_MAJOR, FLEXPOINT_VERSION_MINOR,
             FLEXPOINT_VERSION_PATCH);
    CHECK(strcmp(v, macros) == 0, "flexpoint_version() = %s, FLEXPOINT_VERSION_* = %s", v, macros);

    char cmake[64] = "", python[64] = "";
    const char *cmake_path = FX_SOURCE_DIR "/CMakeLists.txt";
    CHECK(find_value(cmake_path, "project(flexpoint VERSION ", " \t)\r\n", cmake, sizeof cmake),
          "no 'project(flexpoint VERSION x.y.z' line in %s", cmake_path);
    CHECK(strcmp(v, cmake) == 0, "flexpoint_version() = %s, CMakeLists.txt project() = %s", v,
          cmake);

    const char *py_path = FX_SOURCE_DIR "/python/pyproject.toml";
    CHECK(find_value(py_path, "version = \"", "\"\r\n", python, sizeof python),
          "no 'version = \"x.y.z\"' line in %s", py_path);
    CHECK(strcmp(v, python) == 0, "flexpoint_version() = %s, python/pyproject.toml = %s", v,
          python);
    printf("flexpoint_version() = %s; CMakeLists.txt %s; pyproject.toml %s\n", v, cmake, python);
    return test_finish("test_version");
}
