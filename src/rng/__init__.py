"""Counter-based random numbers: the Philox-4x32-10 generator (:mod:`.philox`) behind SynBench's sampler and the
perturbations' random draws. A foundation package: it imports only :mod:`src.utils`."""
