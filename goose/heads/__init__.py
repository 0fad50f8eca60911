"""The LM head, one idea per module, each importing only the ones listed before it:

protocol  what every head kind offers (LMHead) and what a sampling walk reads of its rows (SampledRows)
rows      the rows a sampled walk reads, float32 only where it asks (TargetRows, ScreenedRows)
screens   the exact heads: the float32 head and the bf16 and int8 screens, with their error bounds
routing   two heads routed by the rows in a call (RoutedHead, "int8+screened@8")
factory   the kinds a run may ask for, and the head of each kind built once per model (head_for)

Import from the module that holds a name: this file re-exports nothing, so that importing the protocol
does not load the factory.
"""
