"""The recipe classes AutoModel 0.7.0's `automodel` CLI resolves from a bare name in `recipe:`.

Source: `nemo_automodel/cli/utils.py`, `_discover_recipe_classes` (every `class ...Recipe...` in
`nemo_automodel/recipes/`, bar BaseRecipe and files starting with `_`), read by `resolve_recipe_name`,
which raises "Unknown recipe class '...'" for a bare name not in it; `cli/app.py` then exits 1. A dotted
path is passed through unchecked. tests/test_rules.py checks this table against the installed AutoModel.
"""

from __future__ import annotations

_RECIPES = "nemo_automodel.recipes"

# bare class name -> the module that defines it
RECIPE_CLASSES: dict[str, str] = {
    "BenchmarkingRecipeForNextTokenPrediction": f"{_RECIPES}.llm.benchmark",
    "DiffusionGemmaSFTRecipe": f"{_RECIPES}.dllm.train_ft",
    "DiffusionLMSFTRecipe": f"{_RECIPES}.dllm.train_ft",
    "EmbeddingDistillRecipe": f"{_RECIPES}.retrieval.distill_bi_encoder",
    "FinetuneRecipeForMultimodal": f"{_RECIPES}.multimodal.finetune",
    "FinetuneRecipeForVLM": f"{_RECIPES}.vlm.finetune",
    "KnowledgeDistillationRecipeForNextTokenPrediction": f"{_RECIPES}.llm.kd",
    "KnowledgeDistillationRecipeForVLM": f"{_RECIPES}.vlm.kd",
    "MineHardNegativesRecipe": f"{_RECIPES}.retrieval.mine_hard_negatives",
    "PeagleRecipeMixin": f"{_RECIPES}.llm.peagle_recipe",
    "PretrainRecipeForMultimodal": f"{_RECIPES}.multimodal.pretrain",
    "TrainBiEncoderRecipe": f"{_RECIPES}.retrieval.train_bi_encoder",
    "TrainCrossEncoderRecipe": f"{_RECIPES}.retrieval.train_cross_encoder",
    "TrainDFlash2Recipe": f"{_RECIPES}.llm.train_dflash2",
    "TrainDFlashRecipe": f"{_RECIPES}.llm.train_dflash",
    "TrainDSparkRecipe": f"{_RECIPES}.llm.train_dspark",
    "TrainDiffusionRecipe": f"{_RECIPES}.diffusion.train",
    "TrainDominoRecipe": f"{_RECIPES}.llm.train_domino",
    "TrainEagle1Recipe": f"{_RECIPES}.llm.train_eagle1",
    "TrainEagle2Recipe": f"{_RECIPES}.llm.train_eagle2",
    "TrainEagle3Recipe": f"{_RECIPES}.llm.train_eagle3",
    "TrainFinetuneRecipeForNextTokenPrediction": f"{_RECIPES}.llm.train_ft",
    "TrainFinetuneRecipeForSequenceClassification": f"{_RECIPES}.llm.train_seq_cls",
    "TrainJetSpecRecipe": f"{_RECIPES}.llm.train_jetspec",
    "TrainVispecRecipe": f"{_RECIPES}.llm.train_vispec",
    "TrainVispecStage1Recipe": f"{_RECIPES}.llm.train_vispec",
}
