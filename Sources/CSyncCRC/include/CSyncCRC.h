// CRC-32C (Castagnoli) for the hub's journal: the processor's instruction where there is one
// (SSE 4.2 on x86-64 and the CRC extension on Linux arm64, both checked at run time; the CRC
// extension on Apple arm64, always there), else a table. Used by StoreHub's CRC32C only.
#ifndef CSYNCCRC_H
#define CSYNCCRC_H

#include <stddef.h>
#include <stdint.h>

/// Continues a CRC-32C over `count` bytes. `crc` is the running register (start with
/// 0xFFFFFFFF, invert the final value): the caller does the pre- and post-inversion.
uint32_t csynccrc_crc32c_update(uint32_t crc, const void *bytes, size_t count);

/// Whether `csynccrc_crc32c_update` uses a processor instruction on this machine.
int csynccrc_crc32c_is_hardware(void);

/// The table path, whatever the machine has (for tests that compare the two).
uint32_t csynccrc_crc32c_update_table(uint32_t crc, const void *bytes, size_t count);

#endif
