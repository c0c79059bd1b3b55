/* A C99 program of two ksbuild packages built as subprojects (CMakeLists.txt): prints each export's results for
 * fixed inputs, one line per export, which tests/test_subproject.py compares with numpy. */
#include <stdio.h>
#include <stdlib.h>

#include "activations.h"
#include "lp.h"

#define N 5

static void print(const char* name, const float* v, int n) {
    int i;
    printf("%s", name);
    for (i = 0; i < n; ++i) printf(" %.9g", v[i]);
    printf("\n");
}

int main(void) {
    const float x[N] = {-2.0f, 0.25f, 0.5f, 1.0f, 3.0f};
    const float w[N * 2] = {0.5f, -1.0f, 0.25f, 0.75f, -0.5f, 0.125f, 1.0f, 2.0f, -0.25f, 0.0f};
    float out[N], layer[N * 2], scalars[2];
    void* workspace;
    int status;

    scalars[0] = activations_relu3(0.5f);
    scalars[1] = lp_log1p(0.5f);
    print("scalars", scalars, 2);
    status = activations_vrelu3(N, x, out, NULL);
    print("vrelu3", out, N);
    status |= lp_vlog1p(N - 1, x + 1, out, NULL);
    print("vlog1p", out, N - 1);
    /* layer: x as 1 x 5 times w as 5 x 2 */
    workspace = malloc(lp_layer_workspace_size(1, N, 2) + 1);  /* (malloc aligns to 16 bytes here) */
    status |= lp_layer(1, N, 2, x, w, layer, workspace);
    free(workspace);
    print("layer", layer, 2);
    printf("status %d\n", status);
    return status;
}
