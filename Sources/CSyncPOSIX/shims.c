#if defined(__linux__)
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <sys/socket.h>
#include <unistd.h>
#include "CSyncPOSIX.h"

int csyncposix_accept4(int listener, int flags) { return accept4(listener, NULL, NULL, flags); }

int csyncposix_pipe2(int ends[2], int flags) { return pipe2(ends, flags); }
#endif
