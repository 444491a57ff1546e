"""The bundled offline images: photos (:mod:`.photos`), the scikit-learn digits (:mod:`.digits`) and the one
vocabulary of probe-image sources of the image monitors (:mod:`.probe_images`). A foundation package: it imports
only :mod:`src.utils`."""
