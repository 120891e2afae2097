"""The onnx-int8 recipe: which ops it quantises, and that a recipe change gets its own cache entry and id."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meddevkg_core import onnx_encoder
from meddevkg_core.onnx_encoder import FP32_NODES, ONNX_SUFFIX, RECIPE_VERSION, RECIPES, OnnxRecipe, cache_key


def test_onnx_int8_recipe_quantises_the_attention_but_not_the_outlier_matmuls() -> None:
    recipe = RECIPES["onnx-int8"]
    assert recipe.precision == "int8" and recipe.per_channel and not recipe.reduce_range
    assert set(recipe.op_types_to_quantize) == {"MatMul", "Attention"}  # the fused QKV projection too
    assert recipe.nodes_to_exclude == FP32_NODES and len(FP32_NODES) == 4
    assert RECIPES["onnx-fp32"] == OnnxRecipe("fp32")


def test_recipe_and_its_version_key_the_cache_and_the_model_id(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = RECIPES["onnx-int8"]
    assert all(s.endswith(f"-r{RECIPE_VERSION}") for s in ONNX_SUFFIX.values())
    key = cache_key("abc", recipe)
    assert key != cache_key("abc", replace(recipe, op_types_to_quantize=("MatMul",)))  # r2's recipe
    monkeypatch.setattr(onnx_encoder, "RECIPE_VERSION", RECIPE_VERSION + 1)
    assert cache_key("abc", recipe) != key
