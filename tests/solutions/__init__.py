"""The expert kernels of solutions/experts/ on CPU: their arithmetic against the goldens, their data movement
on threads, their kernels' sources on host threads (host_kernel.py, host_sort_kernel.py)."""
