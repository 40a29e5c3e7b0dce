/* flexpoint_tests: every tests/test_*.c in one executable (tests/CMakeLists.txt says why).
 *
 * The build renames each test's main() to fx_test_main_<name> and makes a link named after
 * each test, build/.../tests/<name> -> flexpoint_tests; the name the program was started by
 * picks the test, so `./build/release/tests/test_unary` runs test_unary as if it were its own
 * program, and a test that runs itself again through argv[0] (with other environment
 * variables) reaches itself. `flexpoint_tests <name> [args]` does the same through the link
 * next to the executable; `flexpoint_tests --list` prints the names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each test's renamed main, and a wrapper that calls it under one signature: the tests declare
 * main either way, and calling a function through a pointer of another type is undefined. */
#define FX_TEST(name)                                                                          \
    int fx_test_main_##name(void);                                                             \
    static int run_##name(int argc, char **argv)                                               \
    {                                                                                          \
        (void)argc;                                                                            \
        (void)argv;                                                                            \
        return fx_test_main_##name();                                                          \
    }
#define FX_TEST_WITH_ARGS(name)                                                                \
    int fx_test_main_##name(int argc, char **argv);                                            \
    static int run_##name(int argc, char **argv) { return fx_test_main_##name(argc, argv); }
#include "test_registry.h"
#undef FX_TEST
#undef FX_TEST_WITH_ARGS

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
} test_entry;

#define FX_TEST(name) {#name, run_##name},
#define FX_TEST_WITH_ARGS(name) {#name, run_##name},
static const test_entry tests[] = {
#include "test_registry.h"
};
#undef FX_TEST
#undef FX_TEST_WITH_ARGS

static const char runner_name[] = "flexpoint_tests";

static const test_entry *find_test(const char *name)
{
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (strcmp(tests[i].name, name) == 0)
            return &tests[i];
    return NULL;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int usage(FILE *out)
{
    fprintf(out,
            "usage: %s <test> [args]   (or run the link named after the test)\n"
            "       %s --list\n",
            runner_name, runner_name);
    return out == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    const char *invoked = argc > 0 && argv[0] ? base_name(argv[0]) : runner_name;
    if (strcmp(invoked, runner_name) != 0) {
        const test_entry *t = find_test(invoked);
        if (!t) {
            fprintf(stderr, "%s: started as '%s', which names no test (%s --list)\n",
                    runner_name, invoked, runner_name);
            return 2;
        }
        return t->run(argc, argv);
    }
    if (argc < 2)
        return usage(stderr);
    if (strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return usage(stdout);
    const test_entry *t = find_test(argv[1]);
    if (!t) {
        fprintf(stderr, "%s: no test named '%s' (%s --list)\n", runner_name, argv[1],
                runner_name);
        return 2;
    }
    /* The test sees the link named after it as argv[0], the path it would have had as a
     * program of its own, so that it can start itself again. */
    size_t dir_len = (size_t)(base_name(argv[0]) - argv[0]);
    size_t len = dir_len + strlen(t->name) + 1;
    char *self = malloc(len);
    if (!self) {
        fprintf(stderr, "%s: out of memory\n", runner_name);
        return 2;
    }
    memcpy(self, argv[0], dir_len);
    strcpy(self + dir_len, t->name);
    argv[1] = self;
    int rc = t->run(argc - 1, argv + 1);
    free(self);
    return rc;
}
