/* The logger oxccl hands net plugins (ncclDebugLogger_t). It is variadic, which stable Rust
 * cannot define, so this file formats the message and passes it to the sink Rust set. */
#include <stdarg.h>
#include <stdio.h>

typedef void (*oxccl_log_sink)(int level, unsigned long flags, const char* file, int line, const char* message);

static oxccl_log_sink sink;

void oxccl_net_plugin_set_log_sink(oxccl_log_sink new_sink) { sink = new_sink; }

void oxccl_net_plugin_logger(int level, unsigned long flags, const char* file, int line, const char* format, ...) {
  char message[1024];
  va_list arguments;
  oxccl_log_sink target = sink;
  if (target == NULL || format == NULL) return;
  va_start(arguments, format);
  vsnprintf(message, sizeof message, format, arguments);
  va_end(arguments);
  target(level, flags, file, line, message);
}
