/* torchlike — files linked into the plugin (embedded.S.in): the default
 * model and tokenizer chosen by the CMake cache variables
 * TORCHLIKE_DEFAULT_MODEL / TORCHLIKE_DEFAULT_TOKENIZER, and the manifest. */
#ifndef TORCHLIKE_EMBEDDED_H
#define TORCHLIKE_EMBEDDED_H

extern const unsigned char tl_embedded_model[];
extern const unsigned char tl_embedded_model_end[];
extern const unsigned char tl_embedded_tokenizer[];
extern const unsigned char tl_embedded_tokenizer_end[];
extern const char tl_manifest_yaml[]; /* NUL-terminated */

#endif
