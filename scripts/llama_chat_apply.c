/*
 * Renders a conversation with one of llama.cpp's built-in chat templates
 * (llama_chat_apply_template, its public C API), for
 * scripts/llama_chat_renders.py. Built against a llama.cpp build outside
 * the repo:
 *
 *   cc scripts/llama_chat_apply.c -I$LLAMA_CPP_SRC/include -I$LLAMA_CPP_SRC/ggml/include \
 *      $LLAMA_CPP_BUILD/src/libllama.a $LLAMA_CPP_BUILD/ggml/src/libggml.a \
 *      $LLAMA_CPP_BUILD/ggml/src/libggml-cpu.a $LLAMA_CPP_BUILD/ggml/src/libggml-base.a \
 *      -lstdc++ -lm -lpthread -fopenmp -o /tmp/llama_chat_apply
 *
 * usage: llama_chat_apply TEMPLATE_NAME ADD_ASSISTANT(0|1) < messages
 * where messages are role, content, role, content, ... each ended by a NUL
 * byte. Writes the rendered prompt to stdout; exits 2 if llama.cpp
 * refuses the template.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s TEMPLATE_NAME ADD_ASSISTANT < messages\n", argv[0]);
        return 1;
    }
    size_t cap = 1 << 16, len = 0;
    char *in = malloc(cap);
    size_t n;
    while ((n = fread(in + len, 1, cap - len, stdin)) > 0) {
        len += n;
        if (len == cap) {
            cap *= 2;
            in = realloc(in, cap);
        }
    }
    struct llama_chat_message msgs[256];
    size_t n_msg = 0;
    for (size_t pos = 0; pos < len && n_msg < 256;) {
        const char *role = in + pos;
        pos += strlen(role) + 1;
        if (pos >= len) break;
        const char *content = in + pos;
        pos += strlen(content) + 1;
        msgs[n_msg].role = role;
        msgs[n_msg].content = content;
        n_msg++;
    }
    int32_t size = 1 << 20;
    char *out = malloc(size);
    int32_t got = llama_chat_apply_template(argv[1], msgs, n_msg, atoi(argv[2]) != 0, out, size);
    if (got < 0 || got > size) {
        fprintf(stderr, "llama_chat_apply_template refused %s (%d)\n", argv[1], got);
        return 2;
    }
    fwrite(out, 1, got, stdout);
    return 0;
}
