"""The Megatron-Bridge target: override sets for a recipe function's ConfigContainer from the shared plan.

`compile.compile_megatron` (intent -> override set), `compile.validate_overrides` (override file -> report),
`parse.parse_overrides` / `emit` (the round trip), `rules` (Megatron's own checks, ids `mb-`), `plan` (the
planner's Megatron domains), `slurm` (the srun-native launch).
"""
