"""Models baked at build time, not downloaded at run time: the manifest, the bake, the e5 converter."""
