// Tensor names: LayerOf reads back the layer LayerPrefix wrote, for every tensor a
// checkpoint holds, and refuses what is not a layer.
#include "model/tensor_specs.h"

#include <string>

#include <gtest/gtest.h>

#include "model/presets.h"

namespace latte {
namespace {

TEST(TensorSpecs, LayerOfInvertsLayerPrefix) {
  const Result<ModelConfig> config = ReleasedConfig("v2-lite");
  ASSERT_TRUE(config.ok()) << config.status().message();
  int64_t in_layers = 0;
  for (const TensorSpec& spec : ExpectedTensors(config.value())) {
    int64_t expected = -1;
    for (int64_t layer = 0; layer < config->num_hidden_layers; ++layer) {
      if (spec.name.starts_with(LayerPrefix(layer))) expected = layer;
    }
    EXPECT_EQ(LayerOf(spec.name), expected) << spec.name;
    in_layers += expected >= 0;
  }
  EXPECT_GT(in_layers, 27 * 4);  // every one of the 27 layers holds several tensors
}

TEST(TensorSpecs, LayerOfRefusesNamesOutsideTheLayers) {
  EXPECT_EQ(LayerOf("model.embed_tokens.weight"), -1);
  EXPECT_EQ(LayerOf("lm_head.weight"), -1);
  EXPECT_EQ(LayerOf("model.layers."), -1);
  EXPECT_EQ(LayerOf("model.layers.x.mlp.gate.weight"), -1);
  EXPECT_EQ(LayerOf("model.layers.99999999999999999999.mlp.gate.weight"), -1);
  EXPECT_EQ(LayerOf("layers.3.mlp.gate.weight"), -1);
  EXPECT_EQ(LayerOf("model.layers.60.self_attn.kv_b_proj.weight"), 60);
}

}  // namespace
}  // namespace latte
