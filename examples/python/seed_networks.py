#!/usr/bin/python3
"""The seed post's three networks (seeds/004), written eagerly with nabla as
the post writes them with its toy framework, and checked against PyTorch:
softmax regression, a one-hidden-layer MLP (tanh) and an RNN unrolled over
the batch's rows. Every op is a registered nabla op run at once; the tape
records them and backward() runs the grad ops their GradOpDescMakers emit.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/seed_networks.py
"""
import numpy as np

import nabla

C = 10  # classes
B = 3  # batch (the RNN's time steps)
H0 = 32  # input features
H1 = 16  # RNN hidden size


def onehot(y, depth):
    out = np.zeros((len(y), depth), np.float32)
    out[range(len(y)), y] = 1
    return out


def seed_data():
    """The post's inputs, from its seed."""
    np.random.seed(1234567890)
    bx = np.random.rand(B, H0).astype(np.float32)
    by = onehot(np.random.randint(0, C, B), C)
    w = np.random.rand(H0, C).astype(np.float32) / H0
    w1 = np.random.randn(H0, H0).astype(np.float32) / H0
    wrnn = np.random.randn(H1 + H0, H1).astype(np.float32) / H0
    wout = np.random.randn(H1, C).astype(np.float32) / H0
    return dict(bx=bx, by=by, w=w, w1=w1, wrnn=wrnn, wout=wout)


def softmax_xent(logits, labels):
    """Mean softmax cross entropy against one-hot (soft) labels."""
    out = nabla.ops.softmax_with_cross_entropy(logits, labels, soft_label=True)
    return nabla.ops.mean(out.Loss)


def softmax_regression(d):
    x = nabla.tensor(d["bx"], requires_grad=True, name="input")
    w = nabla.tensor(d["w"], requires_grad=True, name="weight")
    z = x @ w
    z.retain_grad()  # the post compares the logits' gradient too
    loss = softmax_xent(z, nabla.tensor(d["by"], name="labels"))
    loss.backward()
    return {"loss": loss, "W": w, "X": x, "Z": z}


def mlp(d):
    x = nabla.tensor(d["bx"], requires_grad=True, name="input")
    w0 = nabla.tensor(d["w1"], requires_grad=True, name="W0")
    w1 = nabla.tensor(d["w"], requires_grad=True, name="W1")
    z0 = x @ w0
    a0 = nabla.ops.tanh(z0)
    z1 = a0 @ w1
    for t in (z0, a0, z1):
        t.retain_grad()
    loss = softmax_xent(z1, nabla.tensor(d["by"], name="labels"))
    loss.backward()
    return {"loss": loss, "X": x, "W0": w0, "A0": a0, "Z0": z0, "W1": w1, "Z1": z1}


def rnn(d):
    wrnn = nabla.tensor(d["wrnn"], requires_grad=True, name="Wrnn")
    wout = nabla.tensor(d["wout"], requires_grad=True, name="Wout")
    hidden = [nabla.tensor(np.zeros((1, H1), np.float32), name="h0")]
    outputs = []
    for t in range(B):
        x_t = nabla.tensor(d["bx"][t : t + 1, :], requires_grad=True, name=f"x_{t}")
        v = nabla.ops.concat([x_t, hidden[-1]], axis=1)
        h_t = nabla.ops.tanh(v @ wrnn)
        hidden.append(h_t)
        outputs.append(h_t @ wout)
    logits = nabla.ops.concat(outputs, axis=0)
    loss = softmax_xent(logits, nabla.tensor(d["by"], name="labels"))
    loss.backward()
    return {"loss": loss, "Wrnn": wrnn, "Wout": wout}


# ------------------------------------------------------------ the reference


def torch_reference(name, d):
    """The same networks in PyTorch: loss and gradients by the same names."""
    import torch

    def xent(logits):
        return torch.nn.functional.cross_entropy(logits, torch.tensor(d["by"]))

    t = {k: torch.tensor(v, requires_grad=True) for k, v in d.items() if k != "by"}
    if name == "softmax_regression":
        z = t["bx"] @ t["w"]
        z.retain_grad()
        loss = xent(z)
        loss.backward()
        return {"loss": loss, "W": t["w"].grad, "X": t["bx"].grad, "Z": z.grad}
    if name == "mlp":
        z0 = t["bx"] @ t["w1"]
        a0 = torch.tanh(z0)
        z1 = a0 @ t["w"]
        for v in (z0, a0, z1):
            v.retain_grad()
        loss = xent(z1)
        loss.backward()
        return {"loss": loss, "X": t["bx"].grad, "W0": t["w1"].grad, "A0": a0.grad, "Z0": z0.grad,
                "W1": t["w"].grad, "Z1": z1.grad}
    h = torch.zeros((1, H1))
    outs = []
    for step in range(B):
        h = torch.tanh(torch.cat([t["bx"][step : step + 1], h], 1) @ t["wrnn"])
        outs.append(h @ t["wout"])
    loss = xent(torch.cat(outs, 0))
    loss.backward()
    return {"loss": loss, "Wrnn": t["wrnn"].grad, "Wout": t["wout"].grad}


def max_diffs(name, d):
    """Max |nabla - PyTorch| of the loss and of every gradient."""
    ours = {"softmax_regression": softmax_regression, "mlp": mlp, "rnn": rnn}[name](d)
    theirs = torch_reference(name, d)
    diffs = {"loss": float(np.abs(ours["loss"].numpy() - theirs["loss"].item()).max())}
    for key in ours:
        if key != "loss":
            diffs[key] = float(np.abs(ours[key].grad.numpy() - theirs[key].numpy()).max())
    return diffs


if __name__ == "__main__":
    data = seed_data()
    for net in ("softmax_regression", "mlp", "rnn"):
        print(net)
        for key, diff in max_diffs(net, data).items():
            print("  Maxdiff {}: {:.02e}".format(key, diff))
    with nabla.Tape() as tape:
        mlp(data)
    print(tape.show())
