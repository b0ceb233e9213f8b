from __future__ import annotations

import inspect
import re

import little_workflow
from little_workflow import errors
from little_workflow.errors import LittleWorkflowError, RunFailedError


def _error_classes() -> list[type[LittleWorkflowError]]:
    return [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, LittleWorkflowError)
    ]


def test_one_root_and_a_distinct_stable_code_each() -> None:
    classes = _error_classes()
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"[a-z][a-z_]*", code) for code in codes)


def test_every_error_is_drawn_in_the_module_docstring() -> None:
    doc = errors.__doc__ or ""
    for cls in _error_classes():
        assert re.search(rf"{cls.__name__}\s+{cls.code}", doc), cls.__name__


def test_every_error_is_exported_from_the_package() -> None:
    for cls in _error_classes():
        assert getattr(little_workflow, cls.__name__) is cls


def test_a_raise_site_may_refine_the_code() -> None:
    error = errors.ConfigError("bad snapshot", code="CHECKPOINT_SCHEMA_MISMATCH")
    assert error.code == "CHECKPOINT_SCHEMA_MISMATCH"
    assert errors.ConfigError("x").code == "config_error"
    assert error.message == "bad snapshot"
    assert "CHECKPOINT_SCHEMA_MISMATCH" in repr(error)


def test_run_failed_error_carries_its_cause() -> None:
    error = RunFailedError(
        "mismatch",
        cause_code="runtime_config_error",
        run_id="run_1",
        reason="outer_loop_input_mismatch",
    )
    assert (error.code, error.cause_code, error.run_id, error.reason) == (
        "run_failed",
        "runtime_config_error",
        "run_1",
        "outer_loop_input_mismatch",
    )
