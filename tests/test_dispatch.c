/* Run-time CPU dispatch: the FLEXPOINT_CPU override and backend selection. The override is
 * read once at initialisation, so each value is checked in a child process (this program
 * re-executed with the variable set). */
#define _POSIX_C_SOURCE 200809L
#include "flexpoint.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Child: print the backend chosen at start-up and exit 0. */
static int child(void)
{
    printf("%s\n", flexpoint_backend());
    return 0;
}

static void expect_override(const char *self, const char *value, const char *want)
{
    int fd[2];
    if (pipe(fd) != 0) {
        CHECK(0, "pipe failed");
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        setenv("FLEXPOINT_CPU", value, 1);
        execl(self, self, "--child", (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[64] = {0};
    ssize_t n = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child for %s failed", value);
    CHECK(strcmp(buf, want) == 0, "FLEXPOINT_CPU=%s chose '%s', wanted '%s'", value, buf, want);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child();
    const char *best = "scalar";
    for (int i = 0; i < flexpoint_backend_count(); i++)
        if (flexpoint_backend_available(i)) best = flexpoint_backend_name(i);
    printf("CPU features: %s; best backend: %s\n", flexpoint_cpu_features(), best);
    CHECK(flexpoint_backend_available(0) == 1, "scalar is always available");
    for (int i = 0; i < flexpoint_backend_count(); i++) {
        const char *name = flexpoint_backend_name(i);
        expect_override(argv[0], name, flexpoint_backend_available(i) ? name : best);
        if (!flexpoint_backend_available(i))
            CHECK_STATUS(flexpoint_set_backend(name), FX_EUNSUPPORTED);
    }
    expect_override(argv[0], "no-such-level", best); /* unknown: warn and use the best */
    return test_finish("test_dispatch");
}
