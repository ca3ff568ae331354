/* serve_reply.h - answering one HTTP request of `lizard serve`: JSON bodies
 * and OpenAI error objects (counted in /metrics), a whole completion, or a
 * stream of server-sent events. A request waiting for its tokens notices a
 * closed connection within 100 ms and lets its job go; a client that has only
 * shut its sending side gets its answer. */
#ifndef LZ_SERVE_REPLY_H
#define LZ_SERVE_REPLY_H

#include <microhttpd.h> // MHD_Connection, MHD_Result

#include "serve_api.h"  // serve_request, serve_error
#include "serve_http.h" // serve_server
#include "serve_job.h"  // serve_job

/* body (malloc'd, taken; NULL: a 500 for want of memory) with its status. */
enum MHD_Result serve_reply_body(serve_server *srv, struct MHD_Connection *c, int status, char *body,
                                 const char *content_type);
enum MHD_Result serve_reply_error(serve_server *srv, struct MHD_Connection *c, const serve_error *e);
enum MHD_Result serve_reply_error_text(serve_server *srv, struct MHD_Connection *c, int status, const char *type,
                                       const char *code, const char *message);

/* The answer to a submitted job: once it is complete (a stop string ends it
 * early), or as events from admission on (an error before admission is a
 * plain error answer). MHD_NO when the client has left. */
enum MHD_Result serve_reply_whole(serve_server *srv, struct MHD_Connection *c, const serve_request *r,
                                  serve_job *j);
enum MHD_Result serve_reply_stream(serve_server *srv, struct MHD_Connection *c, const serve_request *r,
                                   serve_job *j);

#endif
