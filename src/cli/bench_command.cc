// Placeholder registration (being written now).
#include "cli/commands.h"
namespace latte::cli {
void AddBenchCommand(CLI::App& app) { (void)app; }
}  // namespace latte::cli
