"""The word list of :mod:`rlvr.envs.wordle`: 597 common five-letter English words, written for
this project (no download). Every secret and, with ``words_only``, every accepted guess is one of
them. The scripted solver wins every one of them within five guesses
(``tests/test_envs_games.py`` checks it), so changing the list means running that test.
"""

WORDS: tuple[str, ...] = tuple(
    """
    about above actor adult after again agent agree ahead alarm album alert alive allow alone along
    alter among angel anger angle angry apple apply arena argue arise armor array arrow aside asset
    audio avoid award aware badge baker basic beach beard beast begin being below bench berry birth
    black blade blame blank blast blend bless blind block blood bloom board boast bonus boost booth
    brain brake brand brave bread break brick bride brief bring broad brown brush build built bunch
    burst buyer cabin cable camel candy canoe cargo carry catch cause chain chair chalk charm chart
    chase cheap check chess chest chief child chill choir civic claim class clean clear clerk click
    cliff climb clock close cloth cloud coach coast color couch count court cover crack craft crane
    crash cream crime crisp cross crowd crown cruel crust curve cycle daily dance delay depth diary
    dirty dodge doubt dough draft drain drama dream dress drift drill drink drive eager eagle early
    earth eight elbow elder empty enemy enjoy enter entry equal error essay event exact exist extra
    fable faint faith false fancy feast fence fever field fifth fight final flame flash fleet flesh
    float flock flood floor flour fluid flute focus force forge forth forum frame fresh front frost
    fruit funny giant glass globe glory glove grace grade grain grand grant grape graph grass grave
    great green greet grief grill grind group guard guess guest guide habit happy harsh heart heavy
    hedge hello hobby honey horse hotel house human humor hurry ideal image index inner input irony
    issue ivory jelly jewel joint judge juice knife knock label labor large laser later laugh layer
    learn lemon level light limit linen liver local logic loose lover lower loyal lucky lunch magic
    major maker maple march match mayor medal melon mercy metal meter might minor mixer model money
    month moral motor mount mouse mouth movie music nerve never night noble noise north novel nurse
    ocean offer often olive onion opera orbit order other outer owner oxide paint panel paper party
    pasta patch pause peace peach pearl pedal penny phase phone photo piano piece pilot pitch pizza
    place plain plane plant plate plaza point polar porch pound power press price pride prime print
    prize proof proud prove pulse punch pupil queen quest quick quiet quilt quota quote radar radio
    raise rally range rapid ratio reach react ready realm rebel relax reply rider ridge rifle right
    rigid rival river roast robot rocky round route royal rugby ruler rural salad sauce scale scarf
    scene scent scope score scout screw sense serve seven shade shake shape share shark sharp sheep
    sheet shelf shell shift shine shirt shock shore short shout sight silly since skill skirt slate
    sleep slice slide slope small smart smile smoke snack snake solar solid solve sound south space
    spare spark speak speed spend spice spine spoon sport spray squad stack staff stage stair stake
    stamp stand start state steam steel stick still stock stone stool storm story stove straw strip
    study style sugar suite sunny super sweet swing sword table taste teach teeth thank theme thick
    thief thing think third thumb tiger tight timer title toast token tooth topic torch total touch
    tower trace track trade trail train trait treat trend trial tribe trick truck truly trunk trust
    truth tulip twice twist uncle under union unity upper upset urban usage usual valid value valve
    vapor vault venue verse video vinyl visit vital vivid vocal voice voter wagon waste watch water
    weary whale wheat wheel while white whole width woman world worry worth wound wrist write wrong
    yacht yield young youth zebra
    """.split()
)
