"""The kernel runtime's argument rules (CPU: only the conversion, no launch): every scalar passed to a
kernel says its C type, because the kernel reads exactly the bytes its parameter declares."""
import numpy as np
import pytest

from pkb_env.runtime import f32, f64, i32, i64, u64
from pkb_env.runtime.kernels import _argument


def test_typed_scalars_pass_through_with_their_c_type():
    assert [type(_argument(v)) for v in (i32(1), i64(1), u64(1), f32(0.5), f64(0.5))] == \
        [np.int32, np.int64, np.uint64, np.float32, np.float64]
    assert _argument(f32(1e-5)) == np.float32(1e-5) and _argument(f64(1e-5)) == 1e-5


@pytest.mark.parametrize("value,helpers", [(3, "i32()/i64()/u64()"), (True, "i32()/i64()/u64()"),
                                           (1e-5, "f32() or f64()")])
def test_bare_python_scalars_are_refused_with_the_fix(value, helpers):
    with pytest.raises(TypeError, match=helpers.replace("(", r"\(").replace(")", r"\)")):
        _argument(value)
