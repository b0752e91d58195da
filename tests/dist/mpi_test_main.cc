// gtest's main for tests that run as every rank of an mpirun job: each rank joins the
// job, runs every test, and the job fails if any rank fails.
#include <gtest/gtest.h>

#include "dist/runtime.h"

int main(int argc, char** argv) {
  if (const latte::Status s = latte::InitDistributed(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints the progress; every rank prints its failures.
  if (latte::WorldComm().rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  std::vector<int> every(latte::WorldComm().size());
  latte::WorldComm().AllGatherBytes(&failed, sizeof failed, every.data());
  int any = 0;
  for (int f : every) any |= f;
  latte::FinalizeDistributed();
  return any;
}
