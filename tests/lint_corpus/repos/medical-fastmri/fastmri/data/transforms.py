class UnetDataTransform:
    def __init__(self, which_challenge, mask_func=None, use_seed=True):
        self.which_challenge = which_challenge
        self.mask_func = mask_func
        self.use_seed = use_seed

    def __call__(self, kspace, mask, target, attrs, fname, slice_num):
        seed = None if not self.use_seed else tuple(map(ord, fname))
        return self.mask_func(kspace.shape, seed=seed) if self.mask_func else kspace
