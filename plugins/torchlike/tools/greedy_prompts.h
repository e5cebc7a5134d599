/* The 20 prompts Q8_0 is compared with fp32 on (greedy continuations of 64
 * tokens): test_quantized and the q8_variants tool use the same ones. */
#ifndef TORCHLIKE_GREEDY_PROMPTS_H
#define TORCHLIKE_GREEDY_PROMPTS_H

#define TL_GREEDY_PROMPTS 20
#define TL_GREEDY_TOKENS 64

static const char *const tl_greedy_prompts[TL_GREEDY_PROMPTS] = {
    "It is a truth", "Mr. Darcy", "Elizabeth", "She was", "The evening", "Emma Woodhouse",
    "My dear", "Lady Catherine", "In the morning", "Mrs. Bennet said", "He had", "Anne",
    "Their house", "Captain Wentworth", "I am", "The letter", "Marianne", "After dinner",
    "Sir Thomas", "When they",
};

#endif
