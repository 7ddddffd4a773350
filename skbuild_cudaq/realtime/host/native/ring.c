/* The ring view of one allocation (ring_t in internal.h: the layout of
 * skbuild_cudaq.realtime.ring.layout). */
#include "internal.h"

int ring_from(ring_t *r, unsigned long long address, unsigned int num_slots,
              unsigned int slot_size, const char *who) {
  if (address == 0 || address % 8 != 0) {
    PyErr_Format(PyExc_ValueError, "%s: address must be a non-null, 8-aligned address", who);
    return -1;
  }
  if (num_slots == 0 || slot_size <= HEADER_SIZE || slot_size % 8 != 0) {
    PyErr_Format(PyExc_ValueError, "%s: not a ring layout (num_slots=%u, slot_size=%u)", who,
                 num_slots, slot_size);
    return -1;
  }
  const size_t slots = (size_t)num_slots * slot_size;
  r->base = (uint8_t *)(uintptr_t)address;
  r->num_slots = num_slots;
  r->slot_size = slot_size;
  r->max_payload = slot_size - HEADER_SIZE;
  r->rx = r->base;
  r->tx = r->base + slots;
  r->rx_flags = (uint32_t *)(r->base + 2 * slots);
  r->tx_flags = (uint32_t *)(r->base + 2 * slots + 4u * (size_t)num_slots);
  r->ids = (uint64_t *)(r->base + 2 * slots + 8u * (size_t)num_slots);
  return 0;
}
