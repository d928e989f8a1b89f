"""The studies of the instruction suite, beside its core measurement (``core.py``): each a module
(or a few) with a ``STUDY`` that declares what it needs of the core's measures and what it adds
(``core.VariantStudy``): per-operand latency (``operand_latency``), the instruction
configurations (``configurations``: ``guarded``, ``dependence_types``), the warps x distance grid
(``grid``), the per-SASS steps of multi-SASS instructions (``sass_steps``) and value-dependent
latency (``value_classes``). They import the core, never the reverse; ``suite.py`` lists them."""
