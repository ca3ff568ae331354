/* tokenizer_bytes.c - GPT-2's byte <-> unicode map (the ByteLevel
 * pre-tokenizer and decoder): bytes 33-126, 161-172 and 174-255 stand for
 * themselves, the other 68 bytes for U+0100.. in byte order, so that every
 * byte is a printable character in the vocabulary file. */
#include "tokenizer_internal.h"

static bool maps_to_itself(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

void tk_bytemap_init(tk_bytemap *m) {
    uint32_t next = 256;
    for (unsigned cp = 0; cp < TK_BYTEMAP_CPS; cp++)
        m->byte_of[cp] = -1;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t cp = maps_to_itself(b) ? b : next++;
        char buf[4];
        m->len[b] = (uint8_t)tk_utf8_put(cp, buf);
        m->utf8[b][0] = buf[0];
        m->utf8[b][1] = buf[1];
        m->byte_of[cp] = (int16_t)b;
    }
}
