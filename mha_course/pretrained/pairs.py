"""A small retrieval set for lesson 05's head ablation: a query and its match, a paraphrase.

Written for this course (MIT licence, like the rest of it); nothing is downloaded. Each query's
match says the same thing in other words, mostly without the query's content words, and every
topic has two pairs, so each query meets a near miss among the other matches (the laptop that is
slow, the laptop that will not turn on).

The two lists share no topic: :data:`RANKING_PAIRS` is what the heads are ranked on,
:data:`HELD_OUT_PAIRS` what a pruned model is then judged on, so that the ranking is not judged
on the sentences that made it.
"""

from __future__ import annotations

__all__ = ["RANKING_PAIRS", "HELD_OUT_PAIRS"]

RANKING_PAIRS: list[tuple[str, str]] = [
    ("How do I reset my password?", "I forgot my login and need a new one."),
    ("How do I change my email address?", "I want my account to use a different inbox."),
    ("Where is the nearest train station?", "How far is it to the closest railway stop?"),
    ("When does the last train leave?", "What time is the final departure tonight?"),
    ("It will rain tomorrow.", "Expect showers on the next day."),
    ("It is very hot today.", "The heat this afternoon is unbearable."),
    ("She won the tennis match.", "She beat her opponent on the court."),
    ("The football final was cancelled.", "They called off the championship game."),
    ("The soup is cold.", "My starter arrived without being heated."),
    ("The restaurant is fully booked.", "There are no tables free tonight."),
    ("The doctor says I need more sleep.", "My physician told me to rest longer at night."),
    ("I have a terrible headache.", "My head hurts a lot."),
    ("The flight was delayed by two hours.", "Our plane took off late."),
    ("I lost my suitcase at the airport.", "The airline cannot find my luggage."),
    ("Turn off the lights when you leave.", "Switch the lamps off on your way out."),
    ("The heating is broken.", "The radiators are not warming the house."),
]

HELD_OUT_PAIRS: list[tuple[str, str]] = [
    ("My laptop is very slow.", "The computer takes ages to do anything."),
    ("My laptop will not turn on.", "The computer stays dark when I press the power button."),
    ("The cat sleeps all day.", "My kitten naps from morning to night."),
    ("The dog barks at strangers.", "Our puppy growls when someone new comes in."),
    ("I would like a cup of coffee.", "Can I have an espresso, please?"),
    ("This tea is too sweet.", "There is far too much sugar in my drink."),
    ("How much does this bike cost?", "What is the price of the bicycle?"),
    ("Can I pay by card?", "Do you take credit cards?"),
    ("He is learning to play the piano.", "He takes keyboard lessons every week."),
    ("The concert starts at eight.", "The show begins in the evening at 8 pm."),
    ("The library is closed on Sundays.", "You cannot borrow books at the weekend."),
    ("I am reading a novel about pirates.", "My book is a story of sailors who steal ships."),
    ("The baby is crying.", "The infant will not stop weeping."),
    ("My son starts school next week.", "Our boy begins his first class soon."),
    ("We planted tomatoes in the garden.", "There are new vegetable plants in our yard."),
    ("The roses need more water.", "The flowers are dry and wilting."),
    ("The meeting is moved to Friday.", "We will meet at the end of the week instead."),
    ("I am late for work.", "I will not reach the office on time."),
    ("Bake the cake for forty minutes.", "Leave the sponge in the oven for two thirds of an hour."),
    ("Add a pinch of salt.", "Season the dish very lightly."),
    ("He speaks three languages.", "He is fluent in several tongues."),
    ("How do you say thank you in French?", "What is the French word for thanks?"),
    ("The museum opens at ten.", "The gallery lets visitors in from 10 am."),
    ("Tickets for the zoo are free for children.", "Kids enter the animal park without paying."),
]
