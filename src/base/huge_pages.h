// Large buffers on transparent huge pages. Decode streams every weight once per
// token; on 4 KiB pages that is a TLB miss (a nested page walk under a VM) every
// 4 KiB. On the project's VM a read from 4 KiB pages ran at half the speed of one
// from 2 MiB pages while other jobs loaded the machine, and at the same speed on
// a quiet machine (`latte bench machine` prints both). Where the kernel offers
// THP only on request (transparent_hugepage/enabled = madvise, Debian's default)
// these regions ask.
#pragma once

#include <cstddef>

namespace latte {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// 2 MiB aligned anonymous memory of at least `bytes`, advised MADV_HUGEPAGE.
// zero_fill: touch (zero) every page now, so the huge pages are taken here and not
// in the first timed step; false when the caller overwrites it all at once (the
// kernel's fresh pages read as zero anyway). nullptr on failure.
void* AllocateHugePageRegion(size_t bytes, bool zero_fill = true);
void FreeHugePageRegion(void* p, size_t bytes);

// Backs every page of a region with memory now (MADV_POPULATE_WRITE, or a write to
// each page where the kernel lacks it, before Linux 5.14) without changing what it
// holds: memory promised but never touched is taken here, at start, and not under
// load later when the machine may no longer have it.
void CommitPages(void* p, size_t bytes);

}  // namespace latte
