/* id_list.h - "1,2,3" -> int32 ids, with errors that name the flag. */
#ifndef LZ_ID_LIST_H
#define LZ_ID_LIST_H

#include <stdint.h> // int32_t

#include "error.h" // lz_status

/* *ids is malloc'd; `flag` names the source in errors ("--ids"). */
lz_status lz_parse_id_list(const char *flag, const char *text, int32_t **ids, int *n);

#endif
