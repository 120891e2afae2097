"""Where steps run: in this process (default), in local subprocesses, or in Kubernetes pods.

MEDDEVKG_EXECUTOR picks the executor of every job; the matching run configuration (how many steps
at once, pod images, GPU requests on the encoding steps) lives in docker/run_config/*.yaml and is
passed at launch. The units of parallelism are partitions: device keys and patent grant years.
"""

from __future__ import annotations

import os

import dagster as dg

EXECUTOR_ENV = "MEDDEVKG_EXECUTOR"
EXECUTORS = ("in_process", "multiprocess", "k8s")

GPU_STEPS = ("device_embeddings", "patent_embeddings", "cross_encoder_scores")
"""The steps that benefit from a GPU (tagged meddevkg/gpu); run_config/k8s.yaml requests one for each."""


def executor_from_env(name: str | None = None) -> dg.ExecutorDefinition:
    """The executor MEDDEVKG_EXECUTOR names; a clear error for an unknown name or a missing extra."""
    name = name or os.environ.get(EXECUTOR_ENV) or "in_process"
    if name == "in_process":
        return dg.in_process_executor
    if name == "multiprocess":
        return dg.multiprocess_executor
    if name == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as exc:
            raise RuntimeError(f"{EXECUTOR_ENV}=k8s needs dagster-k8s: pip install 'meddevkg[k8s]'") from exc
        return k8s_job_executor
    raise ValueError(f"{EXECUTOR_ENV}={name!r}: expected one of {', '.join(EXECUTORS)}")
