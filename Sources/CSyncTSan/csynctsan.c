// The header holds everything (static inline); this file gives the target a translation unit
// and checks, when built with the sanitizer, that the annotations link.
#include "CSyncTSan.h"

int csynctsan_enabled_in_c(void) { return csynctsan_enabled(); }
