"""What runs inside a rank beside candidate code (pkb_env/ranks/, pkb_env/runtime/): bursts, the host-staged
process group, the kernel runtime's argument rules."""
