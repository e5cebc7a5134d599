/* Pearson's chi-square of sampled token counts against the probabilities a
 * clause expects (SMP-4 in suites/sampling.c, SMP-5 in suites/sampling_ref.c).
 * Not the clauses' verdicts: each decides what to do with the rare tokens
 * and which quantile to hold the statistic to. */
#ifndef ILAB_CONFORMANCE_CHI_SQUARE_H
#define ILAB_CONFORMANCE_CHI_SQUARE_H

#include <stdint.h>

typedef struct conf_chi_square {
    double chi;           /* over the tokens expected at least 5 times */
    int bins;             /* how many such tokens */
    double rest_expected; /* the other tokens together: draws expected on them */
    double rest_observed; /* and draws that landed on them */
} conf_chi_square;

/* counts[0, v) of n draws against n * p[0, v); borrows both. */
conf_chi_square conf_chi_square_by_token(const int32_t *counts, const double *p, int32_t v, int n);

/* The quantile of chi-square(df) that the standard normal has at z
 * (Wilson-Hilferty; df >= 1). */
double conf_chi_square_quantile(int df, double z);

#endif
