"""Library of the TNCSE/JTCSE reproduction pipeline: data, translation, models, training, evaluation."""
