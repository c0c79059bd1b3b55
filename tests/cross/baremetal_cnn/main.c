/* tests/test_kernel_layer_m4.py's program: examples/onnx_cnn's network on one image whose pixels are
 * ((i * 37) % 101) / 50 - 1 (the test computes the same image in Python), its logits printed with 9 significant
 * digits; the workspace a static buffer of the size the header's function asks for at most. */
#include <cnn_m4.h>

#include <stdint.h>
#include <stdio.h>

#define PIXELS (3 * 16 * 16)

static float image[PIXELS];
static float logits[10];
static float workspace[16384];  /* (bytes checked against cnn_m4_cnn_workspace_size below) */

int main(void) {
    int i;
    int status;
    for (i = 0; i < PIXELS; ++i) {
        image[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    }
    if (cnn_m4_cnn_workspace_size(1) > sizeof workspace) {
        printf("workspace %u bytes needed\n", (unsigned)cnn_m4_cnn_workspace_size(1));
        return 3;
    }
    status = cnn_m4_cnn(1, image, logits, workspace);
    for (i = 0; i < 10; ++i) {
        printf("logit %.9g\n", (double)logits[i]);
    }
    printf("status %d\n", status);
    return status;
}
