"""Models exported from PyTorch, imported and run by nabla: outputs within
rtol 1e-4 of PyTorch's, and one fine-tuning step (gradients of a loss, and
the sgd update) against PyTorch's autograd."""
import numpy as np
import pytest

import onnx_util

torch = pytest.importorskip("torch")


class WithLoss(torch.nn.Module):
    """The model and a scalar loss, so the ONNX graph carries what nabla
    differentiates: mean(model(x) * w) with a fixed random weighting."""

    def __init__(self, model, weight):
        super().__init__()
        self.model = model
        self.register_buffer("weight", weight)

    def forward(self, x):
        y = self.model(x)
        return y, (y * self.weight).mean()


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8), torch.nn.Sigmoid(),
                               torch.nn.Linear(8, 5), torch.nn.LogSoftmax(-1)), (4, 12)


def cnn():
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 6, 3, stride=2, padding=1), torch.nn.BatchNorm2d(6),
        torch.nn.LeakyReLU(0.1), torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Dropout(0.3),
        torch.nn.Linear(6 * 2 * 2, 10), torch.nn.Softmax(-1))
    # Non-trivial running statistics, as after training.
    for bn in (m[1], m[5]):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    return m, (2, 3, 16, 16)


def conv1d():
    return torch.nn.Sequential(torch.nn.Conv1d(3, 8, 5, padding=2, stride=2), torch.nn.ReLU(), torch.nn.MaxPool1d(2),
                               torch.nn.Conv1d(8, 4, 3, groups=4, dilation=2), torch.nn.AvgPool1d(2), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 2, 2)), (2, 3, 32)


class PaddedPools(torch.nn.Module):
    """F.pad before a conv and AvgPool2d(padding=1): PyTorch writes Pad
    nodes, which the importer folds into the window ops' pads."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.pool = torch.nn.AvgPool2d(3, stride=1, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 9, 2)

    def forward(self, x):
        h = self.pool(self.conv(torch.nn.functional.pad(x, (1, 2, 0, 1))))
        return self.fc(h.flatten(1))


def padded_pools():
    return PaddedPools(), (2, 3, 9, 8)


def transformer():
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True,
                                             activation="gelu")
    return layer, (2, 5, 16)


class LastStep(torch.nn.Module):
    """A 2-layer bidirectional recurrent net (unrolled by the importer), its
    last step through a linear layer."""

    def __init__(self, cell, **kw):
        super().__init__()
        self.rnn = cell(5, 6, num_layers=2, bidirectional=True, **kw)
        self.fc = torch.nn.Linear(12, 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y[-1] if not self.rnn.batch_first else y[:, -1])


def lstm():
    return LastStep(torch.nn.LSTM), (4, 2, 5)


def gru():
    return LastStep(torch.nn.GRU, batch_first=True), (2, 4, 5)


class Activations(torch.nn.Module):
    """The activations, reductions and elementwise math PyTorch writes as
    their own ONNX ops (Elu, Softplus, HardSwish, Celu, Selu, PRelu with a
    trained slope, ReduceMax/Min, ReduceLogSumExp, Trilu, Sin, Atan, Floor)
    and Mish as Softplus and Tanh."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = torch.nn.Linear(10, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.prelu = torch.nn.PReLU(16)
        with torch.no_grad():
            self.prelu.weight.uniform_(0.05, 0.5)

    def forward(self, x):
        f = torch.nn.functional
        h = f.hardswish(f.softplus(self.fc2(f.elu(self.fc1(x), 0.7))))
        h = f.mish(self.fc3(h)) * 2
        return torch.cat([
            h.amax(-1, keepdim=True), h.amin(-1, keepdim=True), torch.logsumexp(h, -1, keepdim=True),
            f.softsign(h), f.celu(h, 1.3), self.prelu(h), f.selu(h), torch.sin(h), torch.atan(h), torch.floor(h * 3),
            torch.tril(h.reshape(4, 4, 4), -1).reshape(4, 16)
        ], -1)


def activations():
    return Activations(), (4, 10)


class GatherMask(torch.nn.Module):
    """torch.gather (GatherElements), masked_fill with -inf before a softmax
    (Where, its condition a Not of a bool buffer: computed at run time),
    InstanceNorm2d and pixel_shuffle (DepthToSpace)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.conv = torch.nn.Conv2d(2, 8, 3, padding=1)
        self.norm = torch.nn.InstanceNorm2d(8, affine=True)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)
        self.register_buffer("idx", torch.randint(0, 8, (4, 8)))
        self.register_buffer("causal", torch.tril(torch.ones(8, 8, dtype=torch.bool)))

    def forward(self, x):
        h = self.fc(x)
        g = torch.gather(h, 1, self.idx)
        s = (h.unsqueeze(2) * g.unsqueeze(1)).masked_fill(~self.causal, float("-inf")).softmax(-1)
        c = self.norm(self.conv(s.reshape(4, 2, 8, 4)))
        return torch.nn.functional.pixel_shuffle(c, 2).reshape(4, -1)


def gather_mask():
    return GatherMask(), (4, 8)


@pytest.mark.parametrize("build", [mlp, cnn, conv1d, padded_pools, transformer, lstm, gru, activations, gather_mask])
def test_torch_model(build, tmp_path):
    torch.manual_seed(7)
    model, shape = build()
    model.eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        y_ref = model(x)
    wrapped = WithLoss(model, torch.randn(*y_ref.shape))
    onnx_path = tmp_path / "model.onnx"
    torch.onnx.export(wrapped, (x,), onnx_path, input_names=["x"], output_names=["y", "loss"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE,
                      dynamic_axes={"x": {0: "batch"}})
    program, weights = onnx_util.import_model(onnx_path, tmp_path, input_shapes={"x": shape})

    got = onnx_util.exec_program(program, {"x": x.numpy()}, ["y"], tmp_path / "fwd", weights=weights)
    np.testing.assert_allclose(got["y"], y_ref.numpy(), rtol=1e-4, atol=1e-5)

    # Exported back to ONNX (onnx's checks pass) and imported again: the same.
    onnx_util.run("export", program, "--weights", weights, "-o", tmp_path / "back.onnx", "--output", "y")
    (tmp_path / "back").mkdir()
    program2, weights2 = onnx_util.import_model(tmp_path / "back.onnx", tmp_path / "back")
    again = onnx_util.exec_program(program2, {"x": x.numpy()}, ["y"], tmp_path / "again", weights=weights2)
    np.testing.assert_allclose(again["y"], got["y"], rtol=1e-5, atol=1e-6)

    # One fine-tuning step: PyTorch's gradients of the same loss, the
    # parameters as the ONNX file names them.
    params = dict(model.named_parameters())
    wrapped.zero_grad()
    loss = wrapped(x)[1]
    loss.backward()
    import safetensors_names
    stored = safetensors_names.names(weights)
    names = [n for n in params if "model." + n in stored or n in stored]
    assert len(names) == len(params), f"parameters missing from the weights: {sorted(set(params) - set(names))}"
    onnx_names = ["model." + n if "model." + n in stored else n for n in names]
    lr = 0.5
    fetched = onnx_util.exec_program(program, {"x": x.numpy()}, ["loss"] + [n + "@GRAD" for n in onnx_names],
                                     tmp_path / "bwd", weights=weights, extra=["--backward", "loss"])
    np.testing.assert_allclose(fetched["loss"].reshape(()), loss.detach().numpy(), rtol=1e-4, atol=1e-6)
    for n, o in zip(names, onnx_names):
        np.testing.assert_allclose(fetched[o + "@GRAD"], params[n].grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=f"gradient of {o}")
    stepped = onnx_util.exec_program(program, {"x": x.numpy()}, onnx_names, tmp_path / "sgd", weights=weights,
                                     extra=["--backward", "loss", "--sgd", str(lr)])
    for n, o in zip(names, onnx_names):
        want = params[n].detach().numpy() - lr * params[n].grad.numpy()
        np.testing.assert_allclose(stepped[o], want, rtol=1e-4, atol=1e-6, err_msg=f"sgd step of {o}")


class FlattenByBatch(torch.nn.Module):
    """x.view(x.size(0), -1) and attention-style reshapes: shape arithmetic
    on a dynamic batch dim, which must become Paddle's 0 and -1."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, stride=2)
        self.attn = torch.nn.MultiheadAttention(4, 2, batch_first=True)
        self.fc = torch.nn.Linear(4 * 9, 3)

    def forward(self, x):
        h = torch.nn.functional.silu(self.conv(x))
        seq = h.reshape(h.size(0), 4, -1).transpose(1, 2)
        seq = self.attn(seq, seq, seq, need_weights=False)[0]
        return self.fc(seq.reshape(seq.size(0), -1))


def test_dynamic_batch_without_input_shape(tmp_path):
    torch.manual_seed(3)
    model = FlattenByBatch().eval()
    torch.onnx.export(model, (torch.randn(2, 1, 7, 7),), tmp_path / "m.onnx", input_names=["x"], output_names=["y"],
                      opset_version=17, dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    program, weights = onnx_util.import_model(tmp_path / "m.onnx", tmp_path)
    for batch in (1, 5):
        x = torch.randn(batch, 1, 7, 7)
        got = onnx_util.exec_program(program, {"x": x.numpy()}, ["y"], tmp_path / f"b{batch}", weights=weights)
        np.testing.assert_allclose(got["y"], model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


class OneHotLoss(torch.nn.Module):
    """F.one_hot of int64 labels (ONNX's OneHot, values [0, 1] in int64) in
    a hand-written cross entropy."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)

    def forward(self, x, labels):
        hot = torch.nn.functional.one_hot(labels, 5).float()
        return -(hot * torch.log_softmax(self.fc(x), -1)).sum(-1).mean()


def test_one_hot_labels(tmp_path):
    torch.manual_seed(5)
    model = OneHotLoss()
    x, labels = torch.randn(4, 6), torch.tensor([0, 4, 2, 1])
    torch.onnx.export(model, (x, labels), tmp_path / "m.onnx", input_names=["x", "labels"], output_names=["loss"],
                      opset_version=17)
    program, weights = onnx_util.import_model(tmp_path / "m.onnx", tmp_path)
    loss = model(x, labels)
    loss.backward()
    got = onnx_util.exec_program(program, {"x": x.numpy(), "labels": labels.numpy()}, ["loss", "fc.weight@GRAD"],
                                 tmp_path / "run", weights=weights, extra=["--backward", "loss"])
    np.testing.assert_allclose(got["loss"].reshape(()), loss.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(got["fc.weight@GRAD"], model.fc.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
