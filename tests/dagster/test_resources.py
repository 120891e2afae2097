"""The model resources as definitions.py builds them from the environment (dg.EnvVar, resolved per run)."""

from __future__ import annotations

import dagster as dg
import pytest
from pydantic import ValidationError

from meddevkg_dagster.resources import CrossEncoderResource, EmbeddingModelResource, build_resources


@dg.asset
def model_settings(embedding_model: EmbeddingModelResource, cross_encoder: CrossEncoderResource) -> dict[str, str]:
    return {"device": embedding_model.device, "embedding_backend": embedding_model.backend,
            "cross_encoder_device": cross_encoder.device, "cross_encoder_backend": cross_encoder.backend}


@dg.asset
def encoded(embedding_model: EmbeddingModelResource) -> None:
    embedding_model.encoder()


@dg.asset
def scored(cross_encoder: CrossEncoderResource) -> None:
    cross_encoder.scorer()


def _materialize(asset: dg.AssetsDefinition) -> dg.ExecuteInProcessResult:
    """The asset run with the model resources built from the environment now, as `dagster dev` builds them."""
    resources = build_resources()
    return dg.materialize([asset], resources={k: resources[k] for k in ("embedding_model", "cross_encoder")},
                          raise_on_error=False)


def _failure(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    errors = [e.event_specific_data.error for e in result.all_events if e.is_failure and e.event_specific_data.error]
    return "\n".join(f"{error.cls_name}: {error.to_string()}" for error in errors)


@pytest.fixture(autouse=True)
def _home(monkeypatch, tmp_path):
    monkeypatch.setenv("MEDDEVKG_HOME", str(tmp_path / "home"))
    for name in ("MEDDEVKG_DEVICE", "MEDDEVKG_EMBEDDING_BACKEND", "MEDDEVKG_CROSS_ENCODER_BACKEND",
                 "MEDDEVKG_CROSS_ENCODER", "MEDDEVKG_EMBEDDING_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("variable", "value", "choices"), [
    ("MEDDEVKG_DEVICE", "gpu", "auto, cpu, cuda"),
    ("MEDDEVKG_EMBEDDING_BACKEND", "onnx", "torch-fp32, torch-int8, onnx-fp32, onnx-int8"),
    ("MEDDEVKG_CROSS_ENCODER_BACKEND", "bge", "sentence-transformers, flagembedding"),
])
def test_a_model_setting_outside_its_choices_fails_the_step_naming_the_variable(monkeypatch, variable, value, choices):
    # it failed only once the step loaded the model, in a message that named no variable (or torch's traceback)
    monkeypatch.setenv(variable, value)
    message = _failure(_materialize(model_settings))
    assert f"{variable}={value!r}" in message and f"expected one of {choices}" in message


def test_model_settings_within_their_choices_reach_the_resources(monkeypatch):
    monkeypatch.setenv("MEDDEVKG_DEVICE", "cpu")
    monkeypatch.setenv("MEDDEVKG_EMBEDDING_BACKEND", "onnx-int8")
    monkeypatch.setenv("MEDDEVKG_CROSS_ENCODER_BACKEND", "flagembedding")
    result = _materialize(model_settings)
    assert result.success
    assert result.output_for_node("model_settings") == {
        "device": "cpu", "embedding_backend": "onnx-int8", "cross_encoder_device": "cpu",
        "cross_encoder_backend": "flagembedding"}
    assert _materialize(model_settings).success  # and unset: the defaults


def test_a_resource_built_with_a_setting_outside_its_choices_is_refused_as_built():
    with pytest.raises(ValidationError, match=r"MEDDEVKG_DEVICE='gpu' \(the embedding_model resource's device\): "
                                              "expected one of auto, cpu, cuda"):
        EmbeddingModelResource(device="gpu")
    with pytest.raises(ValidationError, match="MEDDEVKG_EMBEDDING_BACKEND='onnx'"):
        EmbeddingModelResource(backend="onnx")
    with pytest.raises(ValidationError, match="MEDDEVKG_CROSS_ENCODER_BACKEND='bge'"):
        CrossEncoderResource(backend="bge")
    with pytest.raises(ValidationError, match="MEDDEVKG_DEVICE='gpu'"):
        CrossEncoderResource(device="gpu")


def test_cuda_where_torch_finds_no_gpu_fails_the_model_steps_naming_the_setting(monkeypatch, tiny_bert):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("MEDDEVKG_DEVICE", "cuda")
    monkeypatch.setenv("MEDDEVKG_CROSS_ENCODER", str(tiny_bert))
    for asset in (encoded, scored):
        message = _failure(_materialize(asset))
        assert "InputError: device 'cuda' (MEDDEVKG_DEVICE, --device): torch" in message, message
        assert "AssertionError" not in message and "Torch not compiled" not in message
