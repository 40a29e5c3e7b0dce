/* Smallest useful flexpoint program: the same matmul in every format. */
#include <flexpoint.h>
#include <math.h>
#include <stdio.h>

int main(void)
{
    int64_t shape[2] = {2, 2};
    float a[4] = {1.0f, 2.0f, 3.0f, 4.0f}, b[4] = {0.5f, -1.0f, 0.25f, 2.0f}, c[4];
    const float want[4] = {1.0f, 3.0f, 2.5f, 5.0f};
    for (int f = 0; f < FMT_COUNT; f++) {
        tensor_t *ta = tensor_new((fmt_t)f, 2, shape), *tb = tensor_new((fmt_t)f, 2, shape);
        tensor_t *tc = tensor_new((fmt_t)f, 2, shape);
        if (!ta || !tb || !tc) {
            fprintf(stderr, "tensor_new: %s\n", flexpoint_last_error());
            return 1;
        }
        if (tensor_from_f32(ta, a) || tensor_from_f32(tb, b) || tensor_matmul(tc, ta, tb) ||
            tensor_to_f32(tc, c)) {
            fprintf(stderr, "%s: %s\n", fmt_name((fmt_t)f), flexpoint_last_error());
            return 1;
        }
        for (int i = 0; i < 4; i++)
            if (c[i] != want[i]) {
                fprintf(stderr, "%s: c[%d] = %g, want %g\n", fmt_name((fmt_t)f), i, c[i], want[i]);
                return 1;
            }
        printf("%-8s ok  (backend %s)\n", fmt_name((fmt_t)f), flexpoint_backend());
        tensor_free(ta);
        tensor_free(tb);
        tensor_free(tc);
    }
    return 0;
}
