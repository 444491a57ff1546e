"""Every ``python`` block of README.md and docs/*.md runs as written, each its own test, offline, in a process of its
own (a fork of an interpreter that has imported torch, Lightning and RepBench and run nothing: tests/docs/forkserver.py)
with a temporary working folder (blocks that write ``out/`` write there).

The blocks are excerpts: they use inputs the surrounding text describes (``x``, ``images``, ``bb``, features, a
generator ``g``, ``torch``). :data:`PRELUDE` defines those names with tiny tensors and a tiny random backbone before
the block runs; a block's own imports and assignments replace them. Where a line needs what CI does not have (hub
weights, a local weights file, the official SynBench budget: hours on a CPU, a minute-long sample), :data:`STAND_INS`
swaps that call for a tiny offline one; the line itself says what it needs (its comment or its path), and each swap is
checked to still match its line of the document, so none stops applying unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.docs.forkserver import shared_server
from tests.docs.markdown import DOCS, fences

# The inputs the blocks leave to the reader: images in [0, 1], features (n = 40), a generator, a tiny random backbone
# (timm's test_efficientnet, no download), a DataLoader of (image, label) batches, a weights file for checkpoint_path.
PRELUDE = """\
import torch
torch.manual_seed(0)
x = images = torch.rand(3, 3, 32, 32)  # 3 images: docs/perturbations.md gives one k per image
points = torch.randn(6, 8)
embeddings = torch.randn(3, 5, 8)
eval_features, prior_features = torch.randn(40, 16), torch.randn(40, 12)
features, train_idx, test_idx = eval_features, torch.arange(30), torch.arange(30, 40)
z0, z2, z3 = torch.randn(40, 16), torch.randn(40, 12), torch.randn(40, 8)
g = torch.Generator().manual_seed(0)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, torch.arange(3)), batch_size=2)

def _stand_ins():
    import timm
    from safetensors.torch import save_file
    from src.backbones import create_backbone
    save_file(timm.create_model("test_efficientnet").state_dict(), "test_efficientnet.safetensors")
    return create_backbone("timm:test_efficientnet", pretrained=False)

bb = backbone = _stand_ins()
"""


@dataclass(frozen=True)
class StandIn:
    doc: str
    code: str  # exactly as in the block
    tiny: str  # what runs instead
    needs: str  # what the line needs that CI does not have; said on that line of the document


_SYNBENCH_TINY = "SynBenchConfig(s_values=(0.5, 1.0, 2.0), n_train=128, n_test=128, eps=(0.0, 0.2))"
STAND_INS = [
    StandIn(
        "README.md",
        'create_backbone("timm:vit_base_patch16_224.augreg_in21k_ft_in1k")',
        'create_backbone("timm:test_vit", pretrained=False)',
        "hub",
    ),
    StandIn(
        "README.md",
        'create_backbone("timm:resnet50", checkpoint_path="/path/to/weights.safetensors")',
        'create_backbone("timm:test_efficientnet", checkpoint_path="test_efficientnet.safetensors")',
        "/path",
    ),
    StandIn(
        "README.md",
        'create_backbone("open_clip:ViT-B-32", pretrained="laion2b_s34b_b79k")',
        'create_backbone("open_clip:ViT-B-32", pretrained=None)',
        "tag or local file",
    ),
    StandIn(
        "README.md",
        'pretrained="/path/open_clip_model.safetensors", projection=False',
        "pretrained=None, projection=False",
        "/path",
    ),
    StandIn(
        "README.md",
        'create_backbone("torchvision:resnet50", pretrained=True)',
        'create_backbone("torchvision:resnet50", pretrained=False)',
        "hub",
    ),
    StandIn(
        "README.md",
        'create_backbone("hf:facebook/dinov2-base")',
        'create_backbone("hf:tiny", config=dict(model_type="dinov2", hidden_size=32, num_hidden_layers=2, '
        "num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8))",
        "hub",
    ),
    StandIn(
        "README.md",
        "synbench(bb.embed, input_shape=(3, 224, 224), config=SynBenchConfig(), progress=True)",
        f"synbench(bb.embed, input_shape=(3, 32, 32), config={_SYNBENCH_TINY}, progress=True)",
        "official protocol",
    ),
    StandIn(
        "docs/baselines.md",
        "synthetic_task(bb.embed, (3, 224, 224), cfg, s=1.0)",
        "synthetic_task(bb.embed, (3, 32, 32), SynBenchConfig(n_train=256, n_test=256), s=1.0)",
        "a minute or more",
    ),
]


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    code: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def runnable(self) -> str:
        code = self.code
        for s in STAND_INS:
            if s.doc == self.doc and s.code in code:
                code = code.replace(s.code, s.tiny)
        return code


BLOCKS = [Block(f.doc, f.line, f.text) for doc in DOCS for f in fences(doc) if f.lang == "python"]


def test_the_documents_hold_python_blocks() -> None:
    assert len(BLOCKS) >= 18, [b.id for b in BLOCKS]


@pytest.mark.parametrize("stand_in", STAND_INS, ids=lambda s: f"{s.doc}:{s.code[:40]}")
def test_each_stand_in_matches_a_line_that_says_what_it_needs(stand_in: StandIn) -> None:
    """A stand-in whose code left the document would silently stop applying; the line it replaces names its need
    (hub weights, a local file, the official budget) for a reader too."""
    lines = [ln for b in BLOCKS if b.doc == stand_in.doc for ln in b.code.splitlines() if stand_in.code in ln]
    assert len(lines) == 1, f"{stand_in.code!r} is on {len(lines)} lines of {stand_in.doc}'s python blocks"
    assert stand_in.needs in lines[0], f"{stand_in.doc}: {lines[0]!r} does not say it needs {stand_in.needs!r}"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_python_block_runs(block: Block, tmp_path) -> None:
    status, output = shared_server().run(tmp_path, code=PRELUDE + "\n" + block.runnable(), timeout=280)
    assert status == 0, f"{block.id}:\n{block.runnable()}\n{output[-3000:]}"
