import diffuser.utils as utils

args = parse_args()
dataset = load_dataset(args)
trainer_config = utils.Config(utils.Trainer, train_batch_size=args.batch_size)
trainer = trainer_config(model, dataset)

for i in range(args.n_epochs):
    trainer.train(n_train_steps=args.n_steps_per_epoch)  # want: LD101
