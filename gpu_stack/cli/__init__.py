"""The command line's subcommands beyond `plan` (`python -m gpu_stack diff`, `images`, `advise`);
only `gpu_stack/__main__.py` imports them."""
