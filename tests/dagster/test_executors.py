"""Scale-out configuration: the executors MEDDEVKG_EXECUTOR names and the run configs in docker/run_config."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest
import yaml

from meddevkg_dagster.definitions import build_definitions
from meddevkg_dagster.event_log import EVENT_SETTINGS
from meddevkg_dagster.executors import GPU_STEPS, executor_from_env

RUN_CONFIG = Path(__file__).resolve().parents[2] / "docker" / "run_config"
JOBS = ("patents_job", "meddevkg_job", "device_links_job")


@pytest.mark.parametrize("executor", ["multiprocess", "k8s"])
def test_each_run_config_validates_against_every_job_under_its_executor(executor):
    if executor == "k8s":
        pytest.importorskip("dagster_k8s")
    config = yaml.safe_load((RUN_CONFIG / f"{executor}.yaml").read_text())
    defs = build_definitions(executor)
    for job in JOBS:
        result = dg.validate_run_config(defs.resolve_job_def(job), config)
        executor_name = next(iter(result["execution"]))  # the executor the job resolved to
        assert result["execution"][executor_name]["max_concurrent"] == config["execution"]["config"]["max_concurrent"]


def test_a_misspelt_setting_is_rejected():
    config = yaml.safe_load((RUN_CONFIG / "multiprocess.yaml").read_text())
    config["execution"]["config"]["max_concurent"] = config["execution"]["config"].pop("max_concurrent")
    with pytest.raises(dg.DagsterInvalidConfigError):
        dg.validate_run_config(build_definitions("multiprocess").resolve_job_def("meddevkg_job"), config)


def test_k8s_requests_a_gpu_for_exactly_the_gpu_tagged_steps():
    pytest.importorskip("dagster_k8s")
    per_step = yaml.safe_load((RUN_CONFIG / "k8s.yaml").read_text())["execution"]["config"]["per_step_k8s_config"]
    assert set(per_step) == set(GPU_STEPS)
    for step in GPU_STEPS:
        assert per_step[step]["container_config"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    defs = build_definitions("k8s")
    tagged = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()
              if defs.get_assets_def(k).op.tags.get("meddevkg/gpu") == "true"}
    assert tagged == set(GPU_STEPS)
    steps = {n.name for job in JOBS for n in defs.resolve_job_def(job).graph.node_defs}
    assert set(GPU_STEPS) <= steps  # per-step keys are real step names


def test_the_default_is_in_process_and_unknown_names_fail_clearly(monkeypatch):
    monkeypatch.delenv("MEDDEVKG_EXECUTOR", raising=False)
    assert executor_from_env() is dg.in_process_executor
    assert executor_from_env("multiprocess") is dg.multiprocess_executor
    with pytest.raises(ValueError, match="MEDDEVKG_EXECUTOR='celery'"):
        executor_from_env("celery")


def test_k8s_step_pods_keep_the_store_on_the_shared_volume_and_take_settings_from_the_cluster():
    # The image fixes MEDDEVKG_DUCKDB and MEDDEVKG_EMBEDDING_CACHE to pod-local paths: moving only
    # MEDDEVKG_HOME gave every step pod a warehouse of its own.
    config = yaml.safe_load((RUN_CONFIG / "k8s.yaml").read_text())["execution"]["config"]
    env = dict(item.split("=", 1) for item in config["env_vars"])  # NAME=value each: no pass-through
    assert all("=" in item for item in config["env_vars"])
    [mount] = config["volume_mounts"]
    for name in ("MEDDEVKG_HOME", "MEDDEVKG_DUCKDB", "MEDDEVKG_EMBEDDING_CACHE"):
        assert env[name].startswith(mount["mount_path"]), name
    assert env["MEDDEVKG_EXECUTOR"] == "k8s"
    # Step pods write the events, so they batch them as the compose code service does.
    assert {name: env.get(name) for name in EVENT_SETTINGS} == EVENT_SETTINGS
    assert config["env_config_maps"] and config["env_secrets"]
    dockerfile = (RUN_CONFIG.parents[0] / "Dockerfile").read_text()
    fixed = {n for n in ("MEDDEVKG_HOME", "MEDDEVKG_DUCKDB", "MEDDEVKG_EMBEDDING_CACHE") if f"{n}=" in dockerfile}
    assert fixed <= set(env)  # whatever the image fixes, the step pods move onto the volume


def test_k8s_steps_need_the_k8s_run_launcher_which_the_compose_instance_lacks():
    # k8s.yaml validates under any instance, but dagster-k8s takes each step Job's DAGSTER_HOME and
    # instance ConfigMap from a K8sRunLauncher: under the compose instance's default launcher every
    # step launch failed, and nothing said so.
    pytest.importorskip("dagster_k8s")
    from dagster._core.launcher import DefaultRunLauncher
    from dagster_k8s.container_context import K8sContainerContext

    with pytest.raises(AttributeError, match="DefaultRunLauncher"):
        K8sContainerContext().get_k8s_job_config("meddevkg:latest", DefaultRunLauncher())
    docker = RUN_CONFIG.parent
    assert "run_launcher" not in yaml.safe_load((docker / "dagster.yaml").read_text())
    header = " ".join(line.lstrip("# ") for line in (RUN_CONFIG / "k8s.yaml").read_text().splitlines()
                      if line.startswith("#"))
    assert "dagster_k8s.K8sRunLauncher" in header and "docker/dagster.yaml" in header
    assert "K8sRunLauncher" in (docker / ".env.example").read_text()


def test_k8s_step_pods_run_as_the_images_user_with_write_access_to_the_volume():
    # The image runs as uid 1000, and a fresh volume belongs to root: without fs_group no step pod
    # could create the warehouse. Built as dagster-k8s builds a step's Job (step config, then the step's own).
    pytest.importorskip("dagster_k8s")
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import DagsterK8sJobConfig, UserDefinedDagsterK8sConfig, construct_dagster_k8s_job

    config = yaml.safe_load((RUN_CONFIG / "k8s.yaml").read_text())["execution"]["config"]
    (uid,) = re.findall(r"^ARG APP_UID=(\d+)$", (RUN_CONFIG.parent / "Dockerfile").read_text(), re.M)
    executor = K8sContainerContext(env_vars=config["env_vars"], volumes=config["volumes"],
                                   volume_mounts=config["volume_mounts"],
                                   run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(config["step_k8s_config"]))
    for step in ("candidate_pool", *GPU_STEPS):
        step_config = UserDefinedDagsterK8sConfig.from_dict(config["per_step_k8s_config"].get(step, {}))
        context = executor.merge(K8sContainerContext(run_k8s_config=step_config))
        job = construct_dagster_k8s_job(
            DagsterK8sJobConfig(job_image=config["job_image"], instance_config_map="dagster-instance"),
            args=["dagster", "api", "execute_step"], job_name=step, pod_name=step, component="step_worker",
            user_defined_k8s_config=context.run_k8s_config)
        pod = job.spec.template.spec
        assert pod.security_context.fs_group == int(uid), step
        [mount] = [m for m in pod.containers[0].volume_mounts if m.name == "meddevkg-data"]
        assert mount.mount_path == "/data/meddevkg"
        assert ("nvidia.com/gpu" in pod.containers[0].resources.limits) == (step in GPU_STEPS), step
