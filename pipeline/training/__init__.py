"""Training: the one loop and everything only training uses, read in this order.

- `contract.py`: `TrainingTask`, what a task declares (model, tokenizers, loss, embedding, saving);
- `tasks.py`: the papers' three tasks (SimCSE pretraining, the TNCSE/JTCSE twin, distillation);
- `jobs.py`: one job per training stage (pretrain, joint, distill): settings, examples, checks, run, reports;
- `loop.py`: `train` (resume, step, evaluate and keep the best, finish) and its `RunSpec`;
- `batching.py`: examples to padded batches; `resume.py`: the loop's resume states.
"""
