/* Pearson's chi-square over sampled tokens (chi_square.h). */
#include "chi_square.h"

#include <math.h>

conf_chi_square conf_chi_square_by_token(const int32_t *counts, const double *p, int32_t v, int n)
{
    conf_chi_square cs = {0, 0, 0, 0};
    for (int32_t i = 0; i < v; i++) {
        double e = p[i] * n;
        /* below 5 expected draws a bin's term is not chi-square distributed */
        if (e >= 5) {
            cs.chi += (counts[i] - e) * (counts[i] - e) / e;
            cs.bins++;
        } else {
            cs.rest_expected += e;
            cs.rest_observed += counts[i];
        }
    }
    return cs;
}

double conf_chi_square_quantile(int df, double z)
{
    double k = df;
    return k * pow(1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), 3);
}
