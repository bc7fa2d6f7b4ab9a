class Config:
    def __init__(self, _class, **kwargs):
        self._class = _class
        self._dict = dict(kwargs)

    def __call__(self, *args):
        return self._class(*args, **self._dict)
