// libFuzzer harness: parse and render arbitrary template text with a small
// conversation. Any crash, hang, sanitizer report or runaway allocation is a bug;
// errors are fine. Built by -DLATTE_FUZZ=ON; run by scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::json context = nlohmann::json::parse(R"({
      "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
      "messages": [{"role": "system", "content": "sys"},
                   {"role": "user", "content": "hi {{ x }} 😀"},
                   {"role": "assistant", "content": "<think>r</think>ok", "tool_calls": [
                     {"type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                   {"role": "tool", "content": null}]})");
  latte::Result<latte::ChatTemplate> t =
      latte::ChatTemplate::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  // Small limits keep each input fast; the limits are what is under test.
  t->limits().max_output_bytes = 1 << 20;
  t->limits().max_loop_iterations = 100000;
  t->limits().max_list_items = 10000;
  (void)t->Render(context);
  return 0;
}
