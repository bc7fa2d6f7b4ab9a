import trajectory.utils as utils

args = utils.Parser().parse_args("train")
dataset = utils.load_dataset(args)
trainer_config = utils.Config(
    utils.Trainer,
    batch_size=args.batch_size,
    num_workers=0,
    device=args.device,
)
trainer = trainer_config()

for epoch in range(args.n_epochs):
    trainer.train(model, dataset)  # deny: LD101
