"""Build the bundled demo corpus (meddevkg_core/data/demo/) from hand-written building blocks.

Everything here is fictional and written for this project: companies, trade names, ids and texts.
No text is taken from the real benchmark; only its style and length statistics guided the blocks.

The generator is deterministic (one seeded `random.Random`, insertion-ordered data, no set
iteration in any output), so running it twice gives byte-identical files:

    python scripts/build_demo_corpus.py            # writes meddevkg_core/data/demo/
    python scripts/build_demo_corpus.py --out DIR  # writes somewhere else

Pure Python + polars. `build(out_dir)` is the entry point the tests use.
"""

# ruff: noqa: E501  (the building blocks are prose; long string lines are intended)
from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path

import polars as pl

SEED = 20240611
REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "meddevkg_core" / "data" / "demo"

# --------------------------------------------------------------------------------------------
# Companies. `fda` is the applicant as an FDA approval order prints it; `variants` are the
# assignee spellings a USPTO record may carry. `canonical` follows the rule documented in the
# README: upper case, "&" -> "AND", punctuation removed, trailing legal suffixes removed.
# --------------------------------------------------------------------------------------------

LEGAL_SUFFIXES = ("INC", "INCORPORATED", "CORP", "CORPORATION", "LLC", "LTD", "LIMITED", "GMBH", "AG",
                  "CO", "COMPANY", "SA", "BV", "PLC", "LP")


def canonical_company(name: str) -> str:
    """The canonical company key: upper case, '&' -> AND, no punctuation, no legal suffixes."""
    s = name.upper().replace("&", " AND ")
    s = re.sub(r"[^\w\s]", "", s)
    tokens = s.split()
    while len(tokens) > 1 and tokens[-1] in LEGAL_SUFFIXES:
        tokens.pop()
    return " ".join(tokens)


COMPANIES: dict[str, dict] = {
    "HV": {"fda": "Helix Vascular, Inc.",
           "variants": ["Helix Vascular Inc.", "HELIX VASCULAR, INC", "Helix Vascular, Inc."]},
    "CR": {"fda": "Cardion Rhythm Systems, Inc.",
           "variants": ["Cardion Rhythm Systems Inc.", "CARDION RHYTHM SYSTEMS, INC.", "Cardion Rhythm Systems LLC"]},
    "AM": {"fda": "Aortica Medical Corporation",
           "variants": ["Aortica Medical Corp.", "AORTICA MEDICAL CORPORATION", "Aortica Medical Corporation"]},
    "VT": {"fda": "Valvion Therapeutics, Inc.",
           "variants": ["Valvion Therapeutics Inc.", "VALVION THERAPEUTICS INC", "Valvion Therapeutics, Inc."]},
    "NE": {"fda": "Nordic Electrophysiology Ltd.",
           "variants": ["Nordic Electrophysiology Limited", "NORDIC ELECTROPHYSIOLOGY LTD", "Nordic Electrophysiology Ltd."]},
    "PW": {"fda": "Pulsewave Medical, Inc.",
           "variants": ["Pulsewave Medical Inc.", "PULSEWAVE MEDICAL, INC."]},
    "MC": {"fda": "Meridian Cardiac, Inc.",
           "variants": ["Meridian Cardiac Inc.", "MERIDIAN CARDIAC, INC", "Meridian Cardiac, Inc."]},
    "SE": {"fda": "Stratum Endovascular, LLC",
           "variants": ["Stratum Endovascular LLC", "STRATUM ENDOVASCULAR, LLC", "Stratum Endovascular, Inc."]},
    "CV": {"fda": "Corvessa Heart & Vascular, Inc.", "variants": []},  # no patents at all
    "LX": {"fda": "Lumenix Imaging GmbH", "variants": ["Lumenix Imaging GmbH", "LUMENIX IMAGING GMBH"]},
    # Assignee-only organisations (no devices): competitors, a university, non-cardiovascular firms.
    "BW": {"fda": "Brightwater Cardiovascular Ltd.",
           "variants": ["Brightwater Cardiovascular Ltd.", "BRIGHTWATER CARDIOVASCULAR LIMITED"]},
    "OS": {"fda": "Osprey Interventional Corp.",
           "variants": ["Osprey Interventional Corp.", "OSPREY INTERVENTIONAL CORPORATION"]},
    "TB": {"fda": "Tessaly Biomedical AG", "variants": ["Tessaly Biomedical AG", "TESSALY BIOMEDICAL AG"]},
    "WI": {"fda": "Westlake Institute of Technology", "variants": ["Westlake Institute of Technology"]},
    "KB": {"fda": "Kessler & Brandt Orthopaedics GmbH",
           "variants": ["Kessler & Brandt Orthopaedics GmbH", "KESSLER & BRANDT ORTHOPAEDICS GMBH"]},
    "DD": {"fda": "Dentaris Dental Systems AG", "variants": ["Dentaris Dental Systems AG", "DENTARIS DENTAL SYSTEMS AG"]},
}
CORE_COMPANIES = ("HV", "CR", "AM", "VT", "NE", "PW", "MC", "SE", "CV", "LX")

ACQUISITION = {"acquirer": "MC", "acquired": "PW", "close_date": date(2017, 3, 31)}

# --------------------------------------------------------------------------------------------
# Patent topics: titles, abstract sentences and real CPC groups. `{slot}` values are drawn once
# per patent from `fills` (slots ending in digits share the pool without the digits and are
# drawn distinct). `{A_subject}` / `{a_subject}` are the subject with its article.
# --------------------------------------------------------------------------------------------

TOPICS: dict[str, dict] = {}


def topic(key: str, *, area: str, cpc: list[str], extra_cpc: list[str], fills: dict[str, list[str]],
          titles: list[str], openers: list[str], body: list[str], cardio: bool = True) -> None:
    TOPICS[key] = {"area": area, "cpc": cpc, "extra_cpc": extra_cpc, "fills": fills, "titles": titles,
                   "openers": openers, "body": body, "cardio": cardio}


topic(
    "des", area="coronary", cpc=["A61F2/82"], extra_cpc=["A61F2/91", "A61F2/915", "A61L31/16", "A61L31/10",
                                                         "A61L2300/416"],
    fills={
        "subject": ["drug-eluting stent", "drug-eluting coronary stent", "coated intravascular stent", "stent",
                    "implantable stent"],
        "drug": ["sirolimus", "everolimus", "zotarolimus", "a limus-family antiproliferative agent", "paclitaxel"],
        "polymer": ["a bioabsorbable poly(lactide-co-glycolide) layer", "a fluorinated copolymer matrix",
                    "a poly(n-butyl methacrylate) primer and a copolymer topcoat", "a thin polylactide layer",
                    "an amorphous polyester carrier"],
        "alloy": ["a cobalt chromium alloy", "a platinum chromium alloy", "316L stainless steel"],
    },
    titles=[
        "Drug-eluting stent with abluminal coating and controlled release profile",
        "Coated stent having a biodegradable polymer carrier for {drug}",
        "Stent coating comprising a drug reservoir layer and a rate-limiting topcoat",
        "Method of coating an implantable medical device with a therapeutic agent",
        "Implantable medical device with reduced polymer load and uniform drug distribution",
        "Abluminal drug-eluting stent and method of manufacture",
        "Bioabsorbable polymer coating for a drug-eluting coronary stent",
    ],
    openers=[
        "{A_subject} includes a tubular scaffold and a coating disposed on at least the abluminal surface of the scaffold.",
        "An implantable {subject} is provided for the treatment of coronary artery stenosis and the reduction of restenosis.",
        "Disclosed is {a_subject} having a polymer-based coating from which {drug} is released into the vessel wall over a predetermined period.",
    ],
    body=[
        "The coating comprises {polymer} with {drug} dispersed therein at a drug-to-polymer ratio selected to provide sustained release over at least thirty days.",
        "A primer layer improves adhesion of the drug reservoir layer to the metallic struts during crimping and expansion.",
        "The coating may be applied only to the outer surface of the struts so that the luminal surface remains bare metal and endothelialization is not delayed.",
        "In some embodiments the polymer degrades within six to nine months, leaving a bare metal scaffold after drug elution is complete.",
        "The thickness of the coating is between about 3 and about 8 micrometers and varies by less than ten percent along the length of the stent.",
        "A method of manufacture includes spraying a solution of the polymer and the drug onto the rotating stent and drying the coated stent under controlled humidity.",
        "The release rate is controlled by a rate-limiting topcoat that is substantially free of the therapeutic agent.",
        "The scaffold may be laser cut from a seamless tube of {alloy} and electropolished before coating.",
        "Release of the antiproliferative agent inhibits smooth muscle cell proliferation and thereby reduces neointimal hyperplasia after implantation.",
        "The stent is crimped onto the balloon of a delivery catheter and expanded at the target lesion by inflation of the balloon.",
        "Implantation in a porcine coronary model showed reduced late lumen loss compared with an uncoated control.",
        "Recesses formed in the strut surface may serve as additional drug depots.",
    ],
)

topic(
    "stent_frame", area="coronary", cpc=["A61F2/915"], extra_cpc=["A61F2/91", "A61F2/82", "A61F2/958", "A61L31/022"],
    fills={
        "subject": ["balloon-expandable cobalt chromium stent", "intravascular stent", "stent", "expandable stent",
                    "coronary stent"],
        "connector": ["S-shaped connectors", "flexible links", "undulating bridge members", "offset connectors"],
        "crowns": ["six", "eight", "nine", "ten"],
    },
    titles=[
        "Stent with improved flexibility and radial strength",
        "Expandable stent having {connector} between ring segments",
        "Intravascular stent with reduced strut thickness",
        "Stent design for uniform expansion and side branch access",
        "Balloon-expandable cobalt chromium stent with open cell geometry",
        "Stent pattern with variable crown geometry",
    ],
    openers=[
        "{A_subject} comprises a plurality of circumferential ring segments formed of undulating struts joined at crowns.",
        "{A_subject} is formed as a thin-walled tube having a repeating pattern of struts and connectors.",
        "A stent for a blood vessel includes radially expandable rings coupled by {connector}.",
    ],
    body=[
        "Adjacent ring segments are joined by {connector} that extend at an angle to the longitudinal axis so that the stent bends without shortening.",
        "Each ring has {crowns} crowns, and the crowns of adjacent rings are offset from one another to reduce the risk of strut overlap when the stent is crimped.",
        "The strut thickness is less than about 90 micrometers while radial strength remains sufficient to resist vessel recoil.",
        "End rings of the stent have shorter struts that increase radial stiffness at the ends and reduce edge dissection.",
        "The stent transitions from a crimped configuration on a balloon catheter to an expanded configuration when the balloon is inflated.",
        "The open cell geometry allows a second balloon to be passed through a cell for access to a side branch.",
        "The metal-to-artery ratio of the expanded stent is below fifteen percent.",
        "Radiopaque markers may be attached to the end rings to improve visibility under fluoroscopy.",
        "The pattern is laser cut from a cobalt chromium or platinum chromium tube and then electropolished.",
        "Finite element analysis shows reduced peak strain at the crowns compared with a conventional design.",
    ],
)

topic(
    "ptca", area="coronary", cpc=["A61M25/10"], extra_cpc=["A61M25/104", "A61M25/1027", "A61M25/1029",
                                                           "A61M25/1002"],
    fills={
        "subject": ["balloon catheter", "dilatation catheter", "angioplasty balloon catheter",
                    "rapid exchange balloon catheter", "catheter"],
        "proc": ["percutaneous transluminal coronary angioplasty", "PTCA", "angioplasty", "coronary angioplasty"],
        "material": ["a polyamide", "a polyether block amide", "a nylon blend", "a multilayer polymer"],
    },
    titles=[
        "Balloon catheter for {proc} with improved crossing profile",
        "Dilatation balloon with non-compliant distal section",
        "Rapid exchange catheter shaft with kink-resistant transition",
        "Scoring balloon catheter and method of dilating a stenosis",
        "Catheter balloon formed of {material} and method of folding",
        "Balloon catheter with tapered inner member",
    ],
    openers=[
        "{A_subject} for {proc} includes an elongate shaft having an inflation lumen and a guidewire lumen, and an inflatable balloon at the distal end.",
        "{A_subject} is disclosed for dilating a stenosis in a coronary artery during {proc}.",
        "A catheter for {proc} has a proximal hypotube, a distal polymer shaft and a dilatation balloon.",
    ],
    body=[
        "The balloon is formed of {material} and has a rated burst pressure of at least 18 atmospheres.",
        "A guidewire port located about 25 centimeters from the distal tip allows rapid exchange over a standard guidewire.",
        "The balloon is folded into three or more wings and heat set so that it rewraps after deflation.",
        "An inner tubular member extends through the balloon and carries two radiopaque marker bands.",
        "The distal tip is tapered and formed of a soft material to improve crossing of tight or calcified lesions.",
        "In some embodiments, scoring elements mounted on the balloon concentrate dilation force along narrow lines of the plaque.",
        "The shaft transitions gradually in stiffness from the hypotube to the distal section to resist kinking.",
        "A hydrophilic coating on the distal shaft reduces friction within the guide catheter.",
        "In a method of use the balloon is advanced across the lesion, inflated to the nominal pressure, deflated and withdrawn.",
        "The balloon may also be used to post-dilate a stent after deployment.",
    ],
)

topic(
    "pacemaker", area="rhythm", cpc=["A61N1/362"], extra_cpc=["A61N1/365", "A61N1/37", "A61N1/3702", "A61N1/368"],
    fills={
        "subject": ["implantable pacemaker", "cardiac pacemaker", "implantable pulse generator", "pacemaker",
                    "implantable medical device"],
        "sensor": ["an accelerometer", "a minute ventilation sensor", "a closed-loop impedance sensor"],
        "mode": ["DDD", "DDDR", "VVIR", "AAI"],
    },
    titles=[
        "Rate-adaptive pacemaker using {sensor}",
        "Cardiac pacing system with automatic capture verification",
        "Implantable pulse generator with atrioventricular search hysteresis",
        "Pacemaker mode switching in response to atrial tachyarrhythmia",
        "Method for minimizing ventricular pacing in a dual-chamber pacemaker",
        "Pacing threshold management in an implantable medical device",
    ],
    openers=[
        "{A_subject} delivers pacing pulses to the heart through one or more leads and senses intrinsic cardiac activity.",
        "A cardiac pacing system includes {a_subject} having a hermetic housing, a battery, and control circuitry coupled to atrial and ventricular electrodes.",
        "A method of operating {a_subject} in a {mode} mode is disclosed.",
    ],
    body=[
        "The pacing rate is adjusted in response to a signal from {sensor} so that the heart rate follows the metabolic demand of the patient.",
        "After each pacing pulse the device analyses the evoked response to confirm capture and raises the output if capture is lost.",
        "The atrioventricular delay is periodically extended to search for intrinsic conduction, thereby reducing unnecessary right ventricular pacing.",
        "When an atrial tachyarrhythmia is detected, the device switches from a tracking mode to a non-tracking mode and returns when sinus rhythm resumes.",
        "Pacing thresholds are measured automatically once per day and the pulse amplitude is set to a programmable safety margin above the threshold.",
        "Telemetry circuitry transmits stored diagnostic data to an external programmer or a bedside monitor.",
        "The control circuitry includes a sense amplifier with programmable sensitivity and blanking periods.",
        "The battery longevity is extended by lowering the pulse width when the capture margin allows.",
        "In some embodiments the device provides rate smoothing to limit abrupt changes in the paced rate.",
        "The housing serves as an indifferent electrode for unipolar sensing.",
    ],
)

topic(
    "crt", area="rhythm", cpc=["A61N1/3627"], extra_cpc=["A61N1/368", "A61N1/3684", "A61N1/3682"],
    fills={
        "subject": ["cardiac resynchronization therapy device", "biventricular pacemaker", "CRT-P device",
                    "implantable medical device"],
        "vector": ["a quadripolar left ventricular lead", "a multipolar coronary sinus lead", "a left ventricular lead"],
    },
    titles=[
        "Cardiac resynchronization therapy with adaptive atrioventricular delay",
        "Left ventricular pacing vector selection for resynchronization",
        "Biventricular pacing system with phrenic nerve stimulation avoidance",
        "Method of optimizing interventricular delay in a CRT-P device",
        "Multisite left ventricular pacing for heart failure",
    ],
    openers=[
        "{A_subject} delivers pacing pulses to both ventricles to restore synchronous contraction in patients with heart failure.",
        "A system for cardiac resynchronization includes {a_subject} coupled to a right atrial lead, a right ventricular lead and {vector}.",
        "A method of delivering resynchronization therapy with {a_subject} is disclosed.",
    ],
    body=[
        "The atrioventricular and interventricular delays are adjusted automatically based on intrinsic conduction intervals measured by the device.",
        "Several pacing vectors of {vector} are tested and the vector with the lowest capture threshold and no phrenic nerve stimulation is selected.",
        "The percentage of biventricular pacing is monitored, and the device shortens the atrioventricular delay when the percentage falls below a target.",
        "Pacing from two sites in the left ventricle may further reduce electrical dyssynchrony.",
        "Heart failure diagnostics such as thoracic impedance and heart rate variability are stored for review.",
        "The left ventricular lead is advanced through the coronary sinus into a lateral cardiac vein.",
        "Response to therapy may be assessed from a narrowing of the paced QRS complex.",
        "The device includes a sense amplifier for each chamber and an output circuit for each pacing electrode.",
        "Left ventricular capture is confirmed beat by beat from the evoked response on the left ventricular electrode.",
        "Pacing may be triggered from right ventricular sensed events to maintain resynchronization during premature beats.",
        "An electrogram-based algorithm estimates the optimal delays without echocardiography.",
    ],
)

topic(
    "icd", area="rhythm", cpc=["A61N1/39"], extra_cpc=["A61N1/3956", "A61N1/3987", "A61N1/3925", "A61B5/363"],
    fills={
        "subject": ["implantable cardioverter-defibrillator", "implantable cardioverter defibrillator", "ICD",
                    "implantable medical device"],
        "zone": ["a ventricular fibrillation zone", "a fast ventricular tachycardia zone", "a programmable rate zone"],
    },
    titles=[
        "Tachyarrhythmia discrimination in an {subject}",
        "Method for reducing inappropriate shocks delivered by an {subject}",
        "Antitachycardia pacing before shock therapy",
        "Capacitor charging circuit for high-voltage shock therapy",
        "Morphology-based rhythm classification for shock therapy",
        "Detection of lead noise in an {subject}",
    ],
    openers=[
        "{A_subject} senses cardiac signals, detects ventricular tachyarrhythmias and delivers antitachycardia pacing or high-voltage shocks.",
        "A method is disclosed for classifying a detected tachycardia in {a_subject} before therapy is delivered.",
        "{A_subject} includes a high-voltage capacitor, a charging circuit and a processor that classifies sensed rhythms.",
    ],
    body=[
        "When the sensed rate falls within {zone}, the processor compares the morphology of sensed complexes with a stored template of normally conducted beats.",
        "Rhythms with a sudden onset, stable intervals and a morphology that differs from the template are classified as ventricular in origin.",
        "Antitachycardia pacing is delivered while the capacitor charges so that a shock can be aborted if the rhythm terminates.",
        "Oversensing caused by lead noise is identified from short non-physiological intervals and therapy is withheld.",
        "The shock is delivered as a biphasic waveform between a right ventricular coil and the housing.",
        "Stored electrograms of each episode are transmitted to a remote monitoring server.",
        "The charging circuit includes a flyback transformer that charges the capacitor to about 750 volts within ten seconds.",
        "A confirmation step before delivery verifies that the tachyarrhythmia is still present, reducing unnecessary shocks.",
        "Supraventricular tachycardias are rejected using atrial and ventricular rate comparison.",
        "Defibrillation thresholds may be tested at implant by inducing fibrillation and delivering a test shock.",
    ],
)

topic(
    "pacing_lead", area="rhythm", cpc=["A61N1/05"], extra_cpc=["A61N1/0573", "A61N1/056", "A61N1/057"],
    fills={
        "subject": ["implantable medical lead", "pacing lead", "cardiac lead", "lead", "active fixation lead"],
        "insul": ["silicone rubber", "polyurethane", "a silicone-polyurethane copolymer"],
    },
    titles=[
        "Active fixation lead with extendable helix electrode",
        "Implantable lead having a steroid-eluting electrode",
        "Cardiac lead with coradial conductor coils",
        "Lead body insulation of {insul} with abrasion resistance",
        "Implantable medical lead with MRI-compatible conductor",
        "Pacing lead connector assembly",
    ],
    openers=[
        "{A_subject} includes an elongate lead body, a connector at the proximal end and at least one electrode at the distal end.",
        "{A_subject} for pacing and sensing the heart has a helical fixation electrode that is extended from the distal tip by rotating the terminal pin.",
    ],
    body=[
        "The lead body is insulated with {insul} and contains a coiled conductor that is coupled to the tip electrode.",
        "A monolithic controlled release device adjacent the tip electrode elutes a corticosteroid to reduce chronic pacing thresholds.",
        "The helix is electrically active and serves as the cathode, while a ring electrode spaced proximally serves as the anode.",
        "The conductors are wound coradially to reduce the diameter of the lead body.",
        "The pitch and diameter of the conductor coil are selected to limit heating of the electrode in a magnetic resonance imaging environment.",
        "Tines on the distal end may be used instead of a helix for passive fixation in the trabeculae.",
        "The connector conforms to the IS-1 standard and is sealed by sealing rings.",
        "A stylet inserted through the lumen of the coil stiffens the lead during implantation.",
        "The electrode surface is coated with titanium nitride to increase its effective area.",
    ],
)

topic(
    "defib_lead", area="rhythm", cpc=["A61N1/0563"], extra_cpc=["A61N1/05", "A61N1/39"],
    fills={
        "subject": ["defibrillation lead", "implantable lead", "high-voltage lead", "lead"],
    },
    titles=[
        "Defibrillation lead with backfilled shocking coil",
        "Multilumen lead body for a defibrillation lead",
        "Shocking electrode with reduced tissue ingrowth",
        "DF-4 connector for a high-voltage lead",
    ],
    openers=[
        "{A_subject} includes a multilumen lead body, a shocking coil electrode and a pace/sense electrode at the distal end.",
        "{A_subject} for delivering cardioversion and defibrillation shocks is disclosed.",
        "{A_subject} for an implantable shock system has a single coil and an integrated bipolar sense electrode.",
    ],
    body=[
        "The shocking coil is backfilled with a polymer so that fibrous tissue does not grow between the coil windings, which eases later extraction.",
        "Cables for the high-voltage electrode and conductors for the pace/sense electrode run in separate lumens of the lead body.",
        "A proximal coil may be positioned in the superior vena cava to provide a second shocking vector.",
        "The connector combines the high-voltage and low-voltage contacts in a single four-pole terminal pin.",
        "The lead body has an outer tube of abrasion-resistant polyurethane over an inner silicone body.",
        "The distal electrode is steroid eluting and is fixed by a retractable helix.",
        "The outer diameter of the lead is below 7 French.",
        "A coating of expanded polytetrafluoroethylene over the coil reduces adhesion of fibrous tissue.",
        "The conductor cables are made of drawn filled tubing with a silver core for low resistance.",
        "Integrated bipolar sensing uses the distal coil as the anode, which removes one conductor.",
        "Compression lumens in the lead body absorb crush forces between the clavicle and the first rib.",
    ],
)

topic(
    "aaa_graft", area="aortic", cpc=["A61F2/07"], extra_cpc=["A61F2/89", "A61F2002/065", "A61F2/954",
                                                              "A61F2002/075"],
    fills={
        "subject": ["stent graft", "endovascular graft", "bifurcated stent graft", "endoprosthesis",
                    "modular stent graft"],
        "fabric": ["woven polyester", "expanded polytetrafluoroethylene", "thin-wall polyester"],
    },
    titles=[
        "Bifurcated stent graft for treatment of abdominal aortic aneurysm",
        "Endovascular graft with suprarenal fixation",
        "Modular stent graft and contralateral limb cannulation",
        "Stent graft with sealing ring at the proximal neck",
        "Delivery system for an endovascular graft",
        "Endoprosthesis for short aortic necks",
    ],
    openers=[
        "{A_subject} for excluding an abdominal aortic aneurysm includes a main body with a proximal end and two distal legs.",
        "{A_subject} has a tubular graft of {fabric} supported by a series of self-expanding stents.",
        "A system for endovascular aneurysm repair includes {a_subject}, an iliac limb and a delivery catheter.",
    ],
    body=[
        "A bare suprarenal stent with barbs anchors the proximal end of the graft above the renal arteries.",
        "The graft material is {fabric} sewn to nitinol stents with polyester sutures.",
        "The contralateral gate has a flared opening and radiopaque markers that make cannulation with a guidewire easier.",
        "An inflatable sealing ring at the proximal end conforms to irregular aortic necks to prevent type I endoleak.",
        "The iliac limbs overlap the gate by a predetermined length to provide a secure seal.",
        "The graft is compressed within an outer sheath and released by retracting the sheath while the inner member is held in place.",
        "The delivery profile is below 16 French, allowing percutaneous access through the femoral artery.",
        "The stents are shaped in a Z pattern and the apices are oriented away from the graft fabric to reduce wear.",
        "In some embodiments fenestrations are provided for the renal arteries.",
        "Endoleak and migration were absent at one year in an animal model.",
    ],
)

topic(
    "tevar", area="aortic", cpc=["A61F2/07"], extra_cpc=["A61F2/89", "A61F2/954", "A61F2/95", "A61F2002/061"],
    fills={
        "subject": ["thoracic stent graft", "stent graft", "endograft", "thoracic endoprosthesis"],
    },
    titles=[
        "Thoracic stent graft with conformable proximal end",
        "Stent graft for the aortic arch with branch portal",
        "Delivery catheter with controlled proximal release for a thoracic endograft",
        "Endograft for treatment of aortic dissection",
    ],
    openers=[
        "{A_subject} for the descending thoracic aorta includes a tubular graft supported by a series of nitinol rings.",
        "{A_subject} is disclosed for repairing aneurysms, dissections and penetrating ulcers of the thoracic aorta.",
        "A system comprising {a_subject} and a delivery catheter for the aortic arch is disclosed.",
    ],
    body=[
        "The proximal end has a bare stent that is held by a capture mechanism until the graft is positioned in the curve of the arch.",
        "A flexible graft body without longitudinal spine conforms to the inner curve of the aorta and prevents bird-beaking.",
        "A branch portal in the graft wall allows a side branch graft to be placed into the left subclavian artery.",
        "For aortic dissection the distal section has lower radial force to avoid injuring the fragile dissection flap.",
        "The delivery catheter includes a pre-curved inner member and a handle that retracts the sheath in a controlled manner.",
        "Diameters between 22 and 46 millimeters and lengths up to 200 millimeters are provided.",
        "Radiopaque markers indicate the orientation of the branch portal under fluoroscopy.",
        "The graft fabric is a thin woven polyester that allows a low delivery profile.",
        "Tapered configurations accommodate a change in aortic diameter along the treated segment.",
        "A distal bare stent may be added to improve fixation in the dissected aorta.",
    ],
)

topic(
    "tavr", area="valve", cpc=["A61F2/2418"], extra_cpc=["A61F2/2436", "A61F2/2412", "A61F2/2409", "A61F2220/0075"],
    fills={
        "subject": ["prosthetic heart valve", "transcatheter heart valve", "collapsible prosthetic valve",
                    "replacement heart valve", "prosthetic valve"],
        "proc": ["transcatheter aortic valve replacement", "transcatheter aortic valve implantation", "TAVR",
                 "a transcatheter procedure"],
        "frame": ["a balloon-expandable cobalt chromium frame", "a self-expanding nitinol frame",
                  "a radially expandable frame"],
        "tissue": ["bovine pericardium", "porcine pericardium", "treated pericardial tissue"],
    },
    titles=[
        "Prosthetic heart valve with outer sealing skirt",
        "Transcatheter heart valve and delivery system for {proc}",
        "Collapsible prosthetic valve with commissure attachment features",
        "Delivery catheter for a balloon-expandable prosthetic heart valve",
        "Leaflet attachment in a replacement heart valve",
        "Method of crimping a prosthetic valve onto a delivery balloon",
        "Prosthetic valve frame with reduced crimped profile",
    ],
    openers=[
        "{A_subject} for {proc} comprises {frame}, a valvular structure of {tissue} leaflets and an inner skirt.",
        "{A_subject} is disclosed that can be radially compressed onto a delivery catheter and expanded within the native aortic annulus.",
        "A system for {proc} includes {a_subject} and a delivery apparatus with a steerable shaft.",
    ],
    body=[
        "An outer skirt of polyethylene terephthalate fabric is mounted on the outside of the frame to reduce paravalvular leakage.",
        "The leaflets are secured to the frame at three commissures by tabs that are wrapped around commissure windows.",
        "The frame has rows of angled struts forming closed cells, and the upper row of cells is larger to allow coronary access.",
        "The valve is crimped onto a balloon of the delivery catheter, advanced through the femoral artery and expanded by inflating the balloon.",
        "In an alternative embodiment a self-expanding frame is used, which may be recaptured and repositioned before it is fully released.",
        "The delivery apparatus has a handle with a rotatable knob that flexes the distal end of the shaft to navigate the aortic arch.",
        "The leaflets are formed from {tissue} that is fixed in glutaraldehyde and treated to reduce calcification.",
        "The valve may be implanted within a previously implanted surgical bioprosthesis in a valve-in-valve procedure.",
        "Sizes of 20 to 29 millimeters cover most native annulus diameters.",
        "The crimped profile allows insertion through a 14 French expandable sheath.",
    ],
)

topic(
    "surgical_valve", area="valve", cpc=["A61F2/2412"], extra_cpc=["A61F2/2409", "A61F2/2415", "A61L27/3687"],
    fills={
        "subject": ["bioprosthetic heart valve", "prosthetic heart valve", "tissue valve", "heart valve"],
    },
    titles=[
        "Bioprosthetic heart valve with flexible stent posts",
        "Method of treating bioprosthetic tissue to reduce calcification",
        "Sewing ring for a prosthetic heart valve",
        "Dry storage of a tissue heart valve",
        "Expandable sewing ring permitting future valve-in-valve procedures",
    ],
    openers=[
        "{A_subject} includes a wireform stent with three commissure posts, a sewing ring and three tissue leaflets.",
        "A method of preparing {a_subject} for implantation without rinsing is disclosed.",
        "{A_subject} for surgical replacement of the aortic valve is disclosed.",
    ],
    body=[
        "The stent posts flex inward during diastole, which reduces stress at the leaflet commissures.",
        "The tissue is cross-linked with glutaraldehyde and then treated with a capping agent that blocks residual aldehyde groups.",
        "The leaflets may be stored dry after glycerol treatment, so that the valve can be implanted without rinsing.",
        "The sewing ring is made of silicone covered with polyester cloth and is shaped to conform to the annulus.",
        "A band in the base of the stent can expand when a balloon is inflated inside it, allowing a transcatheter valve to be implanted later.",
        "The leaflets are cut from bovine pericardium selected for uniform thickness.",
        "The valve is supplied in sizes from 19 to 29 millimeters.",
        "Leaflets are mounted outside the stent posts to increase the effective orifice area.",
        "A holder attached to the sewing ring keeps the posts deflected inward during implantation.",
        "Radiopaque markers on the stent identify the valve size on fluoroscopy.",
        "The wireform is made of a cobalt chromium alloy that resists fatigue.",
    ],
)

topic(
    "rf_ablation", area="ep", cpc=["A61B18/1492"], extra_cpc=["A61B2018/00577", "A61B2018/00351",
                                                               "A61B2018/00839", "A61M25/0136", "A61B2090/065"],
    fills={
        "subject": ["bi-directional steerable ablation catheter", "irrigated ablation catheter", "steerable catheter",
                    "ablation catheter", "catheter", "electrophysiology catheter"],
        "arrhythmia": ["atrial fibrillation", "atrial flutter", "ventricular tachycardia"],
    },
    titles=[
        "Bi-directional steerable ablation catheter",
        "Irrigated ablation catheter with contact force sensor",
        "Catheter tip electrode with distributed irrigation ports",
        "Steerable catheter handle with deflection locking mechanism",
        "Ablation catheter for treatment of {arrhythmia}",
        "Catheter with flexible tip electrode for radiofrequency ablation",
    ],
    openers=[
        "{A_subject} includes an elongate shaft, a deflectable distal section and a tip electrode for delivering radiofrequency energy to cardiac tissue.",
        "{A_subject} is provided for creating lesions in the myocardium in the treatment of {arrhythmia}.",
        "A catheter for cardiac ablation has a handle, a catheter body and a distal tip assembly with an ablation electrode.",
    ],
    body=[
        "Two pull wires anchored in the distal section allow the tip to be deflected in two opposite directions by rotating a knob on the handle.",
        "Saline flows through a lumen in the catheter body and exits through irrigation ports in the tip electrode to cool the electrode-tissue interface.",
        "A force sensor in the distal section measures the magnitude and direction of the contact force between the electrode and the tissue.",
        "Ring electrodes proximal to the tip electrode record local electrograms for mapping.",
        "A thermocouple embedded in the tip electrode reports the temperature to the radiofrequency generator.",
        "The deflection can be locked at a selected curve by a friction mechanism in the handle.",
        "The tip electrode is formed of a platinum-iridium shell with a thin wall that conducts heat to the irrigant.",
        "Position sensors in the distal section allow the catheter to be located by a magnetic navigation system.",
        "A braided layer in the catheter body transmits torque from the handle to the tip.",
        "In a method of use the catheter is advanced transseptally to the left atrium and lesions are created around the pulmonary vein ostia.",
    ],
)

topic(
    "cryo", area="ep", cpc=["A61B18/02"], extra_cpc=["A61B2018/0262", "A61B2018/0212", "A61B18/0218"],
    fills={
        "subject": ["cryoablation balloon catheter", "cryogenic balloon catheter", "cryoablation catheter",
                    "balloon catheter"],
    },
    titles=[
        "Cryoablation balloon catheter with uniform cooling",
        "Pulmonary vein isolation using a cryogenic balloon",
        "Cryoablation system with leak detection",
        "Double-walled balloon for cryoablation",
        "Temperature sensing in a cryoablation catheter",
    ],
    openers=[
        "{A_subject} includes an inner balloon and an outer balloon mounted on a catheter shaft, and an injection tube that sprays refrigerant inside the inner balloon.",
        "{A_subject} is disclosed for isolating a pulmonary vein by freezing the tissue around its ostium.",
        "A cryoablation system comprising {a_subject} and a console that supplies refrigerant is disclosed.",
    ],
    body=[
        "Liquid nitrous oxide expands within the balloon and cools its surface to below minus forty degrees Celsius.",
        "The space between the inner and outer balloons is under vacuum, and a loss of vacuum signals a leak to the console.",
        "The injection tube has ports arranged around its circumference so that the equatorial band of the balloon cools uniformly.",
        "A temperature sensor in the exhaust path reports the balloon temperature to the console.",
        "A circular mapping catheter passed through a central lumen records pulmonary vein potentials during the freeze.",
        "The balloon is positioned at the ostium of the vein and occlusion is confirmed by contrast injection.",
        "The catheter is introduced through a steerable sheath from the femoral vein.",
        "Balloon diameters of 23 and 28 millimeters are provided.",
        "The balloon is compliant at low pressure so that it conforms to oval vein ostia.",
        "Freezing is stopped automatically if the oesophageal temperature falls below a limit.",
        "Time to pulmonary vein isolation is displayed to guide the duration of each freeze.",
    ],
)

topic(
    "mapping", area="ep", cpc=["A61B5/287"], extra_cpc=["A61B5/6852", "A61B5/283"],
    fills={
        "subject": ["mapping catheter", "diagnostic catheter", "multi-electrode catheter", "electrode catheter"],
    },
    titles=[
        "High-density mapping catheter with flexible splines",
        "Multi-electrode catheter for electroanatomic mapping",
        "Electrode arrangement on a basket catheter",
        "Catheter with bipolar electrode pairs for local activation mapping",
    ],
    openers=[
        "{A_subject} has a plurality of flexible splines carrying electrodes at its distal end for recording intracardiac electrograms.",
        "{A_subject} for electrophysiology studies includes an array of closely spaced electrodes.",
        "A method of mapping cardiac arrhythmias with {a_subject} is disclosed.",
    ],
    body=[
        "Each spline carries four electrodes spaced two millimeters apart so that bipolar signals can be recorded in several directions.",
        "The splines are formed of nitinol and flatten against the endocardium when pressed against the wall.",
        "Electrode positions are tracked by impedance measurements and displayed in a three-dimensional electroanatomic map.",
        "The catheter may also pace from selected electrodes to test conduction.",
        "Signals are filtered and amplified in the patient interface unit before being shown on the recording system.",
        "The array collapses into a sheath for insertion and expands when advanced out of the sheath.",
        "A magnetic sensor in the shaft provides the position and orientation of the array.",
        "Omnipolar signals are computed from groups of three electrodes so that activation direction does not bias the voltage.",
        "The distal array is rounded so that it does not perforate thin atrial tissue.",
        "The shaft is deflectable in two directions by a handle knob.",
    ],
)

topic(
    "septal_occluder", area="structural", cpc=["A61B17/0057"], extra_cpc=["A61B2017/00575", "A61B2017/00592",
                                                                          "A61B2017/00606"],
    fills={
        "subject": ["septal occluder", "occlusion device", "occluder", "septal closure device"],
    },
    titles=[
        "Septal occluder with double disc nitinol mesh",
        "Occlusion device for closing an atrial septal defect",
        "Occluder with low-profile waist and retrieval feature",
        "Delivery cable for an occlusion device",
    ],
    openers=[
        "{A_subject} for closing an atrial septal defect includes a left atrial disc and a right atrial disc joined by a waist.",
        "{A_subject} formed from braided nitinol wire is disclosed for transcatheter closure of a septal defect.",
        "A method of closing an atrial septal defect with {a_subject} is disclosed.",
    ],
    body=[
        "The discs are heat set from a tubular braid and contain polyester fabric that promotes thrombosis and tissue ingrowth.",
        "The waist diameter matches the stretched diameter of the defect so that the device centres itself.",
        "The occluder is connected to a delivery cable by a threaded hub and can be recaptured into the sheath before release.",
        "The discs have a low profile to reduce the risk of erosion of the atrial wall.",
        "The device is loaded into a delivery sheath and advanced from the femoral vein across the defect.",
        "Correct position is confirmed by echocardiography before the cable is unscrewed.",
        "The wires are coated to reduce nickel release.",
        "A platinum marker band at each hub shows the position of the discs on fluoroscopy.",
        "The left atrial disc is larger than the right atrial disc to cover a deficient rim.",
        "The device is sized from 4 to 38 millimeters in waist diameter.",
    ],
)

topic(
    "laa", area="structural", cpc=["A61B17/12122"], extra_cpc=["A61B17/12172", "A61B17/12031", "A61B2017/00632"],
    fills={
        "subject": ["left atrial appendage occluder", "occlusion device", "appendage closure device", "occluder",
                    "implant"],
    },
    titles=[
        "Left atrial appendage occluder with fixation anchors",
        "Occlusion device for the left atrial appendage",
        "Appendage closure device with covered proximal disc",
        "Delivery system for a left atrial appendage occluder",
        "Implant for reducing thromboembolism in atrial fibrillation",
    ],
    openers=[
        "{A_subject} includes a self-expanding frame that is placed in the left atrial appendage and a membrane that faces the left atrium.",
        "{A_subject} is disclosed for closing the left atrial appendage to reduce the risk of stroke in patients with atrial fibrillation.",
        "A system comprising {a_subject}, an access sheath and a delivery catheter is disclosed.",
    ],
    body=[
        "The frame is formed of nitinol struts, and anchors on the struts engage the wall of the appendage to prevent embolization.",
        "The membrane is a permeable polyester fabric that becomes covered with endothelium after implantation.",
        "In a two-part embodiment, a proximal disc covers the ostium while a distal lobe anchors within the appendage body.",
        "The device is delivered through a transseptal sheath and can be recaptured and redeployed until the seal is satisfactory.",
        "The occluder is available in several diameters to fit appendage ostia of about 15 to 35 millimeters.",
        "A coating on the membrane may reduce device-related thrombus.",
        "Compression of the frame by the appendage wall is checked by transesophageal echocardiography before release.",
        "The frame has a closed distal end that is atraumatic to the thin appendage wall.",
        "A threaded insert connects the implant to the delivery cable and releases it by rotation.",
        "The implant may be used in patients who are not suitable for long-term oral anticoagulation.",
    ],
)

topic(
    "closure", area="structural", cpc=["A61B17/0057"], extra_cpc=["A61B2017/00623", "A61B2017/00654", "A61B17/0401"],
    fills={
        "subject": ["vascular closure device", "closure device", "puncture closure device", "hemostasis device"],
    },
    titles=[
        "Vascular closure device with bioabsorbable anchor and collagen plug",
        "Suture-based closure of an arterial puncture",
        "Closure device for large-bore access sites",
        "Method of sealing a femoral artery puncture",
    ],
    openers=[
        "{A_subject} for sealing a puncture in the wall of a blood vessel includes an intravascular anchor, a sealing plug and a suture.",
        "{A_subject} is disclosed that is inserted through the procedural sheath after a catheterization procedure.",
        "A method of closing a femoral artery puncture with {a_subject} is disclosed.",
    ],
    body=[
        "The anchor is placed against the inner wall of the artery and the plug is compressed against the outer wall by tensioning the suture.",
        "The anchor and plug are made of bioabsorbable polymer and collagen and resorb within about ninety days.",
        "In another embodiment, needles deployed from a foot in the lumen pass sutures through the vessel wall on opposite sides of the puncture.",
        "A blood marking port confirms that the device is correctly positioned in the artery.",
        "Time to hemostasis is reduced compared with manual compression.",
        "The device accommodates access sheaths of 5 to 8 French.",
        "A locator wire indicates when the distal end of the device has entered the artery lumen.",
        "The plug expands on contact with blood and fills the tissue tract.",
        "In a large-bore embodiment, two anchors are deployed to close punctures of up to 24 French.",
        "The suture is cut below the skin after the plug is tamped.",
    ],
)

topic(
    "sfa_stent", area="peripheral", cpc=["A61F2/86"], extra_cpc=["A61F2/915", "A61F2/89", "A61F2210/0014", "A61F2/966"],
    fills={
        "subject": ["self-expanding stent", "peripheral stent", "nitinol stent", "stent", "vascular stent"],
    },
    titles=[
        "Self-expanding nitinol stent for the superficial femoral artery",
        "Fracture-resistant peripheral stent",
        "Stent delivery system with controlled release",
        "Helical stent for use in the femoropopliteal artery",
        "Peripheral stent with interlocking end markers",
    ],
    openers=[
        "{A_subject} for the superficial femoral artery is laser cut from a nitinol tube and shape set to an expanded diameter.",
        "{A_subject} for treatment of peripheral artery disease includes helically arranged struts that tolerate bending, twisting and compression.",
        "A system comprising {a_subject} and a delivery catheter for the femoropopliteal artery is disclosed.",
    ],
    body=[
        "The stent is constrained within an outer sheath of a delivery system and self-expands when the sheath is retracted.",
        "Bridges between adjacent rings are arranged along a helix so that the stent resists fracture during knee flexion.",
        "Tantalum markers at each end of the stent improve visibility under fluoroscopy.",
        "The delivery handle has a thumbwheel that withdraws the sheath in small increments for accurate placement.",
        "The stent is available in lengths up to 200 millimeters and diameters of 5 to 8 millimeters.",
        "The austenite finish temperature is set below body temperature.",
        "Chronic outward force is matched to the femoral artery to limit intimal injury.",
        "A covering of expanded polytetrafluoroethylene may be added to treat long occlusions.",
        "Struts are thinner at the ends to reduce edge stress on the artery.",
        "The stent may be loaded on a triaxial delivery system to prevent stent jumping.",
    ],
)

topic(
    "dcb", area="peripheral", cpc=["A61M25/10"], extra_cpc=["A61L29/16", "A61M2025/105", "A61L2300/416"],
    fills={
        "subject": ["drug-coated balloon", "balloon catheter", "coated balloon catheter", "drug-coated balloon catheter"],
        "proc": ["percutaneous transluminal angioplasty", "PTA", "angioplasty"],
        "excipient": ["urea", "a polysorbate and sorbitol mixture", "a citrate ester", "shellac"],
    },
    titles=[
        "Drug-coated balloon with crystalline paclitaxel coating",
        "Balloon coating comprising paclitaxel and {excipient}",
        "Method of coating an angioplasty balloon with an antiproliferative drug",
        "Drug-coated balloon catheter for {proc} of the femoropopliteal artery",
    ],
    openers=[
        "{A_subject} for {proc} has an inflatable balloon whose outer surface carries a coating of paclitaxel and {excipient}.",
        "{A_subject} is disclosed that transfers an antiproliferative drug to the vessel wall during {proc}.",
        "A method of treating stenosis of the superficial femoral artery by {proc} with {a_subject} is disclosed.",
    ],
    body=[
        "The coating is applied to the folded balloon and transfers to the vessel wall within a one-minute inflation.",
        "The excipient increases the release of the drug upon contact with the tissue while limiting loss during transit.",
        "The drug dose is between 2 and 3.5 micrograms per square millimeter of balloon surface.",
        "A protective sheath covers the coated balloon until it is introduced into the patient.",
        "Crystalline forms of the drug persist in the tissue for several weeks after treatment.",
        "The balloon is inflated at the lesion after vessel preparation with an uncoated balloon.",
        "Paclitaxel inhibits restenosis of the treated artery.",
        "The coating is applied by micropipetting onto the inflated balloon, which is then folded.",
        "Particulate release during handling is reduced by a binding agent.",
        "Balloon lengths up to 200 millimeters treat long femoropopliteal lesions.",
    ],
)

# ---- distractor-only topics (same companies, other device families) -----------------------

topic(
    "guidewire", area="coronary", cpc=["A61M25/09"], extra_cpc=["A61M25/09041", "A61M2025/09083", "A61M2025/09175"],
    fills={"subject": ["guidewire", "guide wire", "coronary guidewire", "interventional guidewire"],
           "tip": ["one", "three", "six", "twelve"], "jacket": ["polyurethane", "PTFE", "a tungsten-loaded polymer"]},
    titles=["Guidewire with tapered core and polymer jacket", "Guidewire tip with shapeable ribbon",
            "Torque-responsive guidewire for chronic total occlusions", "Composite core guidewire",
            "Guidewire with penetrating tip for crossing calcified occlusions"],
    openers=["{A_subject} includes a core wire tapering toward the distal end and a coil or polymer jacket over the distal section.",
             "{A_subject} for crossing coronary occlusions is disclosed.",
             "{A_subject} has a proximal section of high stiffness and a flexible distal section with a shapeable tip."],
    body=["A shaping ribbon in the distal tip retains a curve set by the physician.",
          "The core is formed of stainless steel proximally and nitinol distally, joined by a sleeve.",
          "A hydrophilic coating on the {jacket} jacket reduces friction in tortuous vessels.",
          "Tip load is about {tip} gram or grams, selected for the intended lesion type.",
          "The {subject} transmits torque almost one-to-one from the proximal end to the tip.",
          "Radiopaque coils at the tip improve visibility under fluoroscopy.",
          "The tapered tip has a diameter of about 0.009 inch to penetrate the proximal cap of a chronic total occlusion.",
          "An extension wire can be attached to the proximal end for exchanging catheters.",
          "The core is ground in several tapers so that stiffness changes gradually.",
          "Markers spaced at ten millimetre intervals allow lesion length to be measured."],
)

topic(
    "atherectomy", area="peripheral", cpc=["A61B17/320758"], extra_cpc=["A61B17/3207", "A61B2017/320766", "A61B2017/320775"],
    fills={"subject": ["atherectomy device", "atherectomy catheter", "rotational atherectomy system", "orbital atherectomy device"],
           "speed": ["60,000", "120,000", "160,000", "200,000"]},
    titles=["Rotational atherectomy device with eccentric abrasive crown", "Atherectomy catheter with debris collection",
            "Orbital atherectomy system and drive shaft", "Directional atherectomy catheter with cutter window",
            "Atherectomy device with speed control"],
    openers=["{A_subject} removes calcified plaque from an artery using a rotating cutting or abrasive element.",
             "{A_subject} includes a drive shaft, a motor in a handle and an abrasive element near the distal end.",
             "{A_subject} for treating peripheral artery disease is disclosed."],
    body=["The abrasive element is mounted eccentrically so that it orbits and enlarges the lumen as speed increases.",
          "Saline is pumped through the drive shaft sheath to cool and lubricate the shaft.",
          "In another embodiment, debris is aspirated through a lumen and collected in a chamber in the handle.",
          "The drive shaft advances over a guidewire with an anti-rotation feature.",
          "Rotational speed is controlled up to about {speed} revolutions per minute.",
          "Preparation of the vessel may facilitate subsequent stent or balloon delivery.",
          "A cutter window on one side of the housing is pressed against the plaque by an apposition balloon.",
          "The motor current is monitored to detect stalling of the abrasive element.",
          "Diamond particles bonded to the crown grind calcium into particles smaller than red blood cells.",
          "A foot pedal starts and stops rotation."],
)

topic(
    "embolic_filter", area="coronary", cpc=["A61F2/01"], extra_cpc=["A61F2002/018", "A61F2/0105"],
    fills={"subject": ["embolic protection filter", "distal protection device", "embolic filter", "filter device"],
           "pore": ["80", "100", "120"]},
    titles=["Embolic protection filter on a guidewire", "Distal protection device for saphenous vein graft intervention",
            "Filter retrieval catheter", "Embolic filter with tethered membrane"],
    openers=["{A_subject} includes a porous filter membrane mounted on a self-expanding frame attached to a guidewire.",
             "{A_subject} captures debris released during an interventional procedure.",
             "{A_subject} for use during carotid or coronary interventions is disclosed."],
    body=["The filter is deployed distal to the lesion and retrieved into a recovery sheath after treatment.",
          "The membrane has pores of about {pore} micrometers.",
          "The frame is formed of nitinol wire and opens to appose the vessel wall.",
          "The device may be used during stenting of saphenous vein bypass grafts or carotid arteries.",
          "A recovery catheter collapses the filter and the captured debris.",
          "The filter can rotate freely on the wire so that wire movement is not transmitted to the vessel wall.",
          "A delivery sheath keeps the filter collapsed while it crosses the lesion.",
          "The membrane is made of polyurethane with laser-drilled holes."],
)

topic(
    "leadless", area="rhythm", cpc=["A61N1/3756"], extra_cpc=["A61N1/362", "A61N1/37205", "A61N1/37512"],
    fills={"subject": ["leadless pacemaker", "leadless pacing device", "intracardiac pacemaker", "leadless cardiac pacemaker"],
           "years": ["eight", "ten", "twelve"]},
    titles=["Leadless pacemaker with tine fixation", "Delivery catheter for a leadless pacing device",
            "Atrioventricular synchronous pacing with an intracardiac pacemaker", "Retrieval of a leadless pacemaker",
            "Leadless pacemaker with helical fixation and torque limiter"],
    openers=["{A_subject} is implanted entirely within a chamber of the heart and includes a housing, a battery and electrodes on the housing.",
             "{A_subject} is delivered by a catheter to the right ventricle and fixed by flexible tines.",
             "A system is disclosed comprising {a_subject} and a catheter for delivering and retrieving it."],
    body=["A docking button on the proximal end allows the device to be snared and retrieved.",
          "An accelerometer senses atrial contraction so that ventricular pacing can track the atrium.",
          "The device is loaded into a cup at the distal end of a deflectable delivery catheter.",
          "Pacing pulses are delivered between a tip electrode and a ring electrode on the housing.",
          "No transvenous lead or subcutaneous pocket is required, which avoids lead fracture and pocket infection.",
          "Battery longevity exceeds {years} years at nominal settings.",
          "A helical screw fixes the device in the myocardium, and a torque limiter prevents over-rotation.",
          "Conductive communication with a second device in the atrium coordinates pacing of both chambers.",
          "The housing is coated with titanium nitride on the electrode area.",
          "A tether keeps the device connected to the catheter until fixation is confirmed."],
)

topic(
    "monitor", area="rhythm", cpc=["A61B5/0031"], extra_cpc=["A61B5/349", "A61B5/686", "A61B5/361"],
    fills={"subject": ["insertable cardiac monitor", "implantable loop recorder", "subcutaneous cardiac monitor"],
           "years": ["two", "three", "four"]},
    titles=["Insertable cardiac monitor with atrial fibrillation detection",
            "Remote monitoring of implanted cardiac devices",
            "Subcutaneous loop recorder with wireless data transfer",
            "Arrhythmia episode prioritisation for clinician review",
            "Pause detection with noise rejection in a cardiac monitor"],
    openers=["{A_subject} records subcutaneous electrocardiogram signals and detects arrhythmia episodes.",
             "{A_subject} stores detected episodes and transmits them to a clinic server through a patient smartphone.",
             "A method of detecting arrhythmias with {a_subject} is disclosed."],
    body=["R-R interval irregularity is analysed to detect atrial fibrillation.",
          "Episodes are ranked by clinical relevance so that the clinician reviews the most important first.",
          "The device is inserted under the skin through a small incision using an insertion tool.",
          "A Bluetooth low energy link transfers data to the patient application.",
          "Alerts are sent when predefined conditions such as long pauses occur.",
          "The housing carries two sensing electrodes spaced about four centimetres apart.",
          "Noise caused by muscle activity is detected from signal slope and excluded from pause detection.",
          "The battery lasts about {years} years.",
          "A patient activator allows symptoms to be marked.",
          "Detection parameters can be changed remotely without an office visit."],
)

topic(
    "vascular_graft", area="aortic", cpc=["A61F2/06"], extra_cpc=["A61L27/507", "A61L27/16", "A61F2/062"],
    fills={"subject": ["vascular graft", "prosthetic vascular graft", "graft", "textile graft"],
           "diam": ["6", "8", "10", "24", "28"]},
    titles=["Knitted polyester vascular graft with gelatin sealant", "ePTFE vascular graft with reinforcing beading",
            "Branched graft for open aortic arch replacement", "Hybrid graft with stented distal end",
            "Vascular graft with heparin-bonded lumen"],
    openers=["{A_subject} for surgical replacement of a diseased artery comprises a tubular textile wall.",
             "{A_subject} is formed of expanded polytetrafluoroethylene with a controlled node and fibril structure.",
             "{A_subject} for open surgical repair of the aorta is disclosed."],
    body=["The wall is impregnated with a resorbable gelatin so that it is impervious to blood at implantation.",
          "External beading resists kinking and compression when the graft crosses a joint.",
          "Side branches sewn to the main tube allow reconnection of the arch vessels.",
          "The graft is sutured end-to-end to the native vessel.",
          "Crimping of the textile wall improves flexibility.",
          "Grafts are supplied in diameters from {diam} millimeters upward.",
          "A self-expanding stent attached to the distal end is deployed into the descending aorta during open arch surgery.",
          "Heparin bonded to the luminal surface reduces early thrombosis of small-diameter grafts.",
          "The knit structure allows the graft to be cut to length without fraying.",
          "The graft is used for bypass of the femoral and popliteal arteries."],
)

topic(
    "sheath", area="aortic", cpc=["A61M25/0662"], extra_cpc=["A61M25/0668", "A61M2025/0681", "A61M39/0606"],
    fills={"subject": ["introducer sheath", "expandable sheath", "access sheath", "delivery sheath"],
           "fr": ["12", "14", "16", "18", "22"]},
    titles=["Expandable introducer sheath for large-bore devices", "Introducer sheath with hemostasis valve",
            "Kink-resistant access sheath", "Steerable delivery sheath with deflectable tip", "Sheath with radiopaque distal band"],
    openers=["{A_subject} provides percutaneous access to a blood vessel for the introduction of catheters and implants.",
             "{A_subject} has a wall that expands locally as a device passes through it and then recovers.",
             "{A_subject} of {fr} French inner diameter is disclosed."],
    body=["A hemostasis valve in the hub prevents blood loss around inserted devices.",
          "A braided reinforcement resists kinking in tortuous iliac arteries.",
          "The dilator has a tapered tip that eases insertion over a guidewire.",
          "Local expansion reduces the insertion profile by several French sizes.",
          "A side port allows flushing and pressure monitoring.",
          "A pull wire deflects the distal end of the {subject} so it can be aimed at a target.",
          "A radiopaque band marks the distal end.",
          "The outer layer has a hydrophilic coating that reduces insertion force.",
          "The {subject} is folded along its length and unfolds as a device is advanced.",
          "A suture collar allows the hub to be fixed to the skin."],
)

topic(
    "mitral_repair", area="valve", cpc=["A61F2/2445"], extra_cpc=["A61F2/2466", "A61B17/0401", "A61F2/2448"],
    fills={"subject": ["annuloplasty ring", "annuloplasty band", "mitral annuloplasty device"],
           "size": ["24", "28", "32", "36", "40"]},
    titles=["Annuloplasty ring with saddle shape", "Adjustable annuloplasty band for mitral regurgitation",
            "Annuloplasty device with shape memory core", "Transcatheter annuloplasty with anchor delivery"],
    openers=["{A_subject} for treating mitral regurgitation is disclosed.",
             "{A_subject} reshapes the mitral annulus to restore coaptation of the leaflets.",
             "A method of repairing a mitral valve with {a_subject} is disclosed."],
    body=["The {subject} has a saddle shape that follows the three-dimensional geometry of the annulus.",
          "The size of the {subject} can be reduced after implantation by rotating a drive member.",
          "A core of shape memory alloy returns the device to its set shape after it is released.",
          "The {subject} is fastened to the annulus with anchors delivered through a transseptal guide catheter.",
          "A fabric covering promotes tissue ingrowth.",
          "The anterior segment is flexible so that the aortic root is not deformed.",
          "Sizes from {size} millimeters are provided to match the intertrigonal distance.",
          "Markings on the covering indicate the positions of the commissures.",
          "The band is open anteriorly and closed posteriorly."],
)

topic(
    "ecg_patch", area="ep", cpc=["A61B5/259"], extra_cpc=["A61B5/0006", "A61B5/282", "A61B5/333"],
    fills={"subject": ["wearable patch", "ECG patch", "ambulatory ECG monitor", "adhesive monitor"],
           "days": ["seven", "fourteen", "thirty"]},
    titles=["Adhesive ECG patch for extended wear", "Wearable patch with embedded arrhythmia detection",
            "Single-lead ambulatory ECG monitor", "Patch monitor with replaceable adhesive"],
    openers=["{A_subject} records a single-lead electrocardiogram for up to {days} days.",
             "{A_subject} includes a flexible circuit, two gel electrodes and a battery in a waterproof housing.",
             "A method of ambulatory heart rhythm monitoring using {a_subject} is disclosed."],
    body=["A hydrocolloid adhesive allows the patch to remain attached during showering.",
          "Recorded data is analysed after the wear period to report arrhythmia burden.",
          "An event button allows the patient to mark symptoms.",
          "The housing is detachable so that the adhesive can be replaced.",
          "The sampling rate is 200 hertz.",
          "A classifier running on the patch flags possible atrial fibrillation in real time.",
          "Skin impedance is monitored to detect loss of electrode contact.",
          "The patch is placed over the sternum.",
          "Data is uploaded by a gateway device when the patient is at home."],
)

topic(
    "rf_generator", area="ep", cpc=["A61B18/1206"], extra_cpc=["A61B2018/00648", "A61B2018/00702", "A61B2018/00875"],
    fills={"subject": ["radiofrequency generator", "ablation generator", "ablation system", "RF energy source"],
           "watts": ["30", "40", "50", "90"]},
    titles=["Power control for radiofrequency ablation based on impedance drop",
            "Ablation generator with temperature-limited power delivery",
            "Lesion size estimation during radiofrequency ablation",
            "High-power short-duration ablation control"],
    openers=["{A_subject} delivers radiofrequency energy to an ablation electrode and regulates the power.",
             "{A_subject} estimates lesion formation from power, contact force and time.",
             "A method of controlling {a_subject} during cardiac ablation is disclosed."],
    body=["Power is reduced when the measured temperature approaches a programmable limit.",
          "A drop in impedance during energy delivery indicates tissue heating.",
          "An index combining force, time and power is displayed to the operator.",
          "The generator communicates with an irrigation pump to increase flow during ablation.",
          "Energy delivery stops if impedance rises suddenly.",
          "Power of about {watts} watts may be delivered for a few seconds while temperature is closely controlled.",
          "The generator records each application for review after the procedure.",
          "A return electrode patch is monitored for adequate skin contact.",
          "The user interface shows power, temperature and impedance curves in real time."],
)

topic(
    "thrombectomy", area="peripheral", cpc=["A61B17/22"], extra_cpc=["A61B2017/22079", "A61B17/221", "A61M1/84"],
    fills={"subject": ["thrombectomy catheter", "aspiration catheter", "clot retrieval device", "thrombectomy system"],
           "fr": ["8", "12", "16", "20", "24"]},
    titles=["Aspiration thrombectomy catheter with expandable funnel", "Mechanical thrombectomy device for deep vein thrombosis",
            "Clot retrieval device with coring element", "Thrombectomy system with blood return filter"],
    openers=["{A_subject} removes thrombus from a blood vessel by aspiration and mechanical disruption.",
             "{A_subject} includes an expandable funnel at its distal end that engages the clot.",
             "{A_subject} of {fr} French for treating venous thromboembolism is disclosed."],
    body=["A vacuum source connected to the hub draws the clot into the catheter.",
          "A coring element separates the thrombus from the vessel wall.",
          "Large-bore lumens allow removal of organised clot without thrombolytic drugs.",
          "The funnel collapses into a delivery sheath.",
          "Blood loss is limited by a flow control valve.",
          "Aspirated blood is filtered and returned to the patient.",
          "The device may be used in the pulmonary arteries.",
          "A rotating macerator breaks up clot at the catheter tip.",
          "A syringe lock maintains suction without continuous operator effort."],
)

topic(
    "ivc_filter", area="peripheral", cpc=["A61F2/01"], extra_cpc=["A61F2002/016", "A61F2/0105"],
    fills={"subject": ["vena cava filter", "IVC filter", "retrievable filter", "caval filter"]},
    titles=["Retrievable inferior vena cava filter", "Vena cava filter with anti-tilt legs", "Convertible caval filter"],
    openers=["{A_subject} is placed in the inferior vena cava to capture emboli travelling toward the lungs.",
             "{A_subject} has a conical arrangement of struts joined at an apex hook.",
             "{A_subject} delivered through the jugular or femoral vein is disclosed."],
    body=["Struts with hooks engage the caval wall and resist migration.",
          "The apex hook allows retrieval with a snare.",
          "Secondary legs keep the filter centred and prevent tilting.",
          "The filter is made of nitinol wire.",
          "The filter may remain as a permanent implant.",
          "A convertible filter opens into a stent-like shape when filtration is no longer needed.",
          "Electropolishing of the struts reduces fracture.",
          "The filter fits cavae up to 28 millimeters in diameter."],
)

topic(
    "hemostasis_pad", area="structural", cpc=["A61B17/1325"], extra_cpc=["A61B17/135", "A61B2017/00004"],
    fills={"subject": ["compression device", "hemostasis band", "radial compression device", "wrist band"],
           "ml": ["10", "13", "15", "18"]},
    titles=["Radial artery compression band with inflatable bladder", "Hemostasis pad with procoagulant coating",
            "Compression device for distal radial access", "Band with two-chamber bladder"],
    openers=["{A_subject} applies pressure to a radial artery puncture after catheterization.",
             "{A_subject} includes a strap and an inflatable bladder positioned over the puncture.",
             "{A_subject} for achieving hemostasis at an access site is disclosed."],
    body=["The bladder is inflated with about {ml} millilitres of air and deflated gradually to maintain patent hemostasis.",
          "A transparent window allows the puncture site to be observed.",
          "A pad impregnated with a procoagulant agent accelerates clot formation.",
          "The band fits wrists of different sizes.",
          "Two chambers apply pressure to the puncture and to the ulnar artery separately.",
          "A curved plate positions the bladder over the anatomical snuffbox for distal radial access.",
          "A marker on the window is aligned with the skin puncture.",
          "The band is released after about two hours."],
)

topic(
    "pfo", area="structural", cpc=["A61B17/0057"], extra_cpc=["A61B2017/00575", "A61B2017/00592", "A61B2017/00619"],
    fills={"subject": ["PFO closure device", "occluder", "closure implant", "septal implant"],
           "disc": ["18", "25", "30", "35"]},
    titles=["Patent foramen ovale closure device", "Occluder for a tunnel-shaped septal opening",
            "Bioabsorbable PFO closure implant", "Closure implant with suture-based anchoring"],
    openers=["{A_subject} for closing a patent foramen ovale has two discs connected by a flexible centre.",
             "{A_subject} adapts to the tunnel length of a patent foramen ovale.",
             "{A_subject} is disclosed for reducing the risk of paradoxical embolism."],
    body=["The flexible centre allows the discs to lie flat against septum primum and septum secundum.",
          "The discs are covered with a porous membrane.",
          "Closure may reduce the risk of recurrent stroke in selected patients.",
          "The device is recapturable before release.",
          "The right atrial disc has a diameter of about {disc} millimeters.",
          "A bioabsorbable frame is replaced by the patient's own tissue within two years.",
          "A suture passed through the septum draws the tunnel closed.",
          "Echocardiography with a bubble study confirms closure."],
)

# ---- non-cardiovascular distractors -------------------------------------------------------

topic(
    "ortho_spine", area="ortho", cardio=False, cpc=["A61F2/4455"], extra_cpc=["A61F2/447", "A61B17/7001", "A61F2/30771"],
    fills={"subject": ["intervertebral implant", "spinal fusion cage", "interbody spacer", "implant"],
           "angle": ["six", "ten", "fifteen", "twenty"]},
    titles=["Intervertebral implant with porous titanium endplates", "Expandable interbody spacer",
            "Spinal fusion cage with bone graft window", "Lateral lumbar interbody implant",
            "Cervical interbody implant with integrated screws"],
    openers=["{A_subject} is placed between adjacent vertebral bodies to restore disc height and promote fusion.",
             "{A_subject} has a body with a central cavity for receiving bone graft material.",
             "{A_subject} for spinal fusion surgery is disclosed."],
    body=["Porous titanium endplates formed by additive manufacturing encourage bone ingrowth.",
          "The height of the spacer can be increased after insertion by turning a drive screw.",
          "Teeth on the upper and lower surfaces resist expulsion.",
          "The cavity is filled with autograft or allograft bone graft.",
          "A radiolucent polyether ether ketone body allows assessment of fusion on radiographs.",
          "The implant is inserted through a lateral approach using an inserter instrument.",
          "A lordotic angle of about {angle} degrees restores sagittal alignment.",
          "Two screws pass through the implant into the vertebral bodies, so no separate plate is needed.",
          "A locking clip prevents the screws from backing out.",
          "The implant footprint spans the ring apophysis where the bone is strongest."],
)

topic(
    "ortho_joint", area="ortho", cardio=False, cpc=["A61F2/38"], extra_cpc=["A61F2/3094", "A61F2/30767", "A61F2/32"],
    fills={"subject": ["joint prosthesis", "joint implant", "prosthetic component"]},
    titles=["Knee prosthesis with mobile bearing insert", "Acetabular cup with porous coating",
            "Femoral component with cemented and cementless fixation", "Tibial tray with keel and pegs"],
    openers=["{A_subject} for total joint replacement is disclosed.",
             "{A_subject} includes a metallic component and a polyethylene bearing.",
             "{A_subject} with improved fixation to bone is disclosed."],
    body=["The bearing is made of highly cross-linked ultra-high molecular weight polyethylene.",
          "A porous coating on the bone-facing surface allows biological fixation.",
          "The articulating surfaces are shaped to reproduce natural joint kinematics.",
          "Modular stems allow adjustment of leg length and offset.",
          "The components are made of cobalt chromium or titanium alloy.",
          "A keel and pegs on the tibial tray resist rotation.",
          "The bearing may rotate on the tray to reduce wear.",
          "Vitamin E added to the polyethylene reduces oxidation.",
          "Patient-specific guides position the cutting blocks."],
)

topic(
    "bone_screw", area="ortho", cardio=False, cpc=["A61B17/8605"], extra_cpc=["A61B17/864", "A61B17/80", "A61B17/8625"],
    fills={"subject": ["bone screw", "locking screw", "bone fixation screw"], "deg": ["ten", "fifteen", "twenty"]},
    titles=["Locking bone screw with variable angle head", "Bone plate and screw system for fracture fixation",
            "Cannulated screw with fenestrations", "Self-tapping cortical screw"],
    openers=["{A_subject} for fixing bone fragments is disclosed.",
             "{A_subject} has a threaded shaft and a head that locks into a plate hole.",
             "{A_subject} for use in osteoporotic bone is disclosed."],
    body=["The head has threads that engage the plate hole at angles up to {deg} degrees.",
          "A cannula through the screw allows insertion over a guide wire.",
          "Fenestrations allow bone cement to be injected in osteoporotic bone.",
          "The plate is contoured to the anatomy of the distal radius.",
          "The screw is made of titanium alloy.",
          "Cutting flutes at the tip make pre-tapping unnecessary.",
          "The thread pitch differs between the tip and the shank to compress the fracture.",
          "A hexalobular drive recess transmits high torque."],
)

topic(
    "dental_implant", area="dental", cardio=False, cpc=["A61C8/0018"], extra_cpc=["A61C8/0022", "A61C8/006", "A61C8/0068"],
    fills={"subject": ["dental implant", "implant", "endosseous implant", "tooth implant"],
           "len": ["8", "10", "11.5", "13"]},
    titles=["Dental implant with conical connection", "Endosseous implant with microthreaded collar",
            "Abutment for a dental implant", "Short dental implant for reduced bone height"],
    openers=["{A_subject} is inserted into the jawbone to support a dental prosthesis.",
             "{A_subject} comprises a threaded body, an internal conical connection and an abutment.",
             "{A_subject} with a length of about {len} millimeters is disclosed."],
    body=["The surface is sandblasted and acid etched to promote osseointegration.",
          "A microthreaded collar reduces crestal bone loss.",
          "The conical connection seals against bacterial leakage.",
          "The abutment is fixed by a screw and may be angled.",
          "The implant is made of titanium or zirconia.",
          "Immediate loading is possible when primary stability is sufficient.",
          "Self-cutting threads allow insertion without tapping.",
          "Platform switching moves the abutment junction away from the bone.",
          "A healing cap protects the connection during osseointegration."],
)

topic(
    "orthodontic", area="dental", cardio=False, cpc=["A61C7/08"], extra_cpc=["A61C7/002", "A61C7/12"],
    fills={"subject": ["orthodontic aligner", "aligner system", "clear aligner"], "weeks": ["one", "two"]},
    titles=["Clear aligner with attachment engagement features", "Aligner series with staged tooth movement",
            "Method of designing aligners from an intraoral scan"],
    openers=["{A_subject} moves teeth through a series of incremental positions.",
             "{A_subject} is formed from a thermoplastic sheet over a model of the teeth.",
             "A method of producing {a_subject} is disclosed."],
    body=["Each aligner is worn for about {weeks} week or weeks before the next in the series.",
          "Attachments bonded to the teeth improve force transmission.",
          "The treatment plan is generated from an intraoral scan.",
          "Pressure points formed in the aligner wall direct force to selected teeth.",
          "The aligners are thermoformed over printed models.",
          "Elastics hooked to the aligners correct the bite.",
          "Progress is compared with the plan using photographs taken by the patient."],
)

topic(
    "ultrasound", area="imaging", cardio=False, cpc=["A61B8/5207"], extra_cpc=["A61B8/4483", "G01S7/52", "A61B8/5223"],
    fills={"subject": ["ultrasound imaging system", "ultrasound probe", "imaging system", "diagnostic ultrasound system"],
           "mhz": ["2", "5", "7.5", "12"], "organ": ["liver", "thyroid", "kidney", "fetal head", "breast"]},
    titles=["Ultrasound imaging system with adaptive beamforming", "Matrix array ultrasound probe",
            "Speckle reduction in ultrasound images", "Automated measurement in ultrasound imaging",
            "Ultrasound elastography of the {organ}", "Handheld ultrasound probe with wireless connection"],
    openers=["{A_subject} transmits ultrasound pulses into tissue and forms images from the received echoes.",
             "{A_subject} includes a transducer array, a beamformer and an image processor.",
             "{A_subject} for examining the {organ} is disclosed."],
    body=["Beamforming weights are adapted to the local coherence of the received signals.",
          "A matrix array allows volumetric imaging in real time.",
          "Speckle is reduced by compounding images acquired at several angles.",
          "A neural network identifies anatomical landmarks of the {organ} for automated measurements.",
          "The probe housing contains application-specific integrated circuits for sub-aperture beamforming.",
          "Doppler processing estimates blood velocity.",
          "The centre frequency of the transducer is about {mhz} megahertz.",
          "Shear waves generated by an acoustic push are tracked to estimate tissue stiffness.",
          "A handheld probe connects wirelessly to a tablet that displays the images.",
          "Gain and depth are adjusted automatically from image statistics."],
)

topic(
    "ct_recon", area="imaging", cardio=False, cpc=["G06T11/006"], extra_cpc=["A61B6/032", "A61B6/5205", "G06T2211/424"],
    fills={"subject": ["computed tomography system", "image reconstruction method", "CT scanner", "tomographic imaging system"],
           "kv": ["80", "100", "120", "140"]},
    titles=["Iterative reconstruction for low-dose computed tomography", "Motion correction in computed tomography",
            "Spectral computed tomography with photon counting detector", "Metal artefact reduction in CT images",
            "Deep learning denoising of tomographic images"],
    openers=["{A_subject} reconstructs images from projection data acquired by a rotating x-ray source and detector.",
             "{A_subject} reduces noise in images acquired at low radiation dose.",
             "A method for operating {a_subject} is disclosed."],
    body=["A statistical model of the measurement noise is used in each iteration.",
          "Motion of the patient is estimated from the projection data and compensated.",
          "A photon counting detector sorts photons into energy bins for material decomposition.",
          "A trained network removes streak artefacts.",
          "Reconstruction runs on a graphics processing unit.",
          "Projections passing through metal implants are identified and replaced by interpolated values.",
          "The tube voltage is set to about {kv} kilovolts according to patient size.",
          "Regularisation preserves edges while smoothing uniform regions.",
          "The reconstructed volume is displayed as slices and three-dimensional renderings."],
)

topic(
    "ivus", area="coronary", cpc=["A61B8/12"], extra_cpc=["A61B8/445", "A61B5/0066", "A61B8/0891"],
    fills={"subject": ["intravascular ultrasound catheter", "imaging catheter", "intravascular imaging catheter"],
           "mhz": ["20", "40", "60"]},
    titles=["Intravascular ultrasound catheter with rotating transducer", "Imaging catheter with co-registered angiography",
            "Pullback device for an intravascular imaging catheter", "Phased array intravascular ultrasound catheter"],
    openers=["{A_subject} acquires cross-sectional images of a blood vessel from within its lumen.",
             "{A_subject} includes a rotating imaging core inside a sheath and a pullback device.",
             "A system comprising {a_subject} and an image processing console is disclosed."],
    body=["The imaging core is rotated by a drive cable and pulled back at a constant speed.",
          "Images are co-registered with the angiogram to locate lesions.",
          "Lumen area and plaque burden are measured automatically.",
          "The sheath is flushed with saline to remove air.",
          "Imaging helps to select stent size and confirm stent expansion.",
          "The transducer operates at about {mhz} megahertz.",
          "A solid-state array of transducer elements around the tip avoids rotating parts.",
          "The catheter tracks over a guidewire through a short monorail lumen."],
)

# --------------------------------------------------------------------------------------------
# Devices: hand-written identities; statements are composed from per-family blocks below.
# --------------------------------------------------------------------------------------------

DEVICE_BLOCKS: dict[str, dict] = {
    "des": {
        "fills": {"lesion": ["24", "28", "32", "34", "38"], "dmin": ["2.25", "2.50"], "dmax": ["3.75", "4.00", "4.25"],
                  "drug": ["sirolimus", "everolimus", "zotarolimus"], "days": ["60", "90", "120"]},
        "ind": ["improving coronary luminal diameter in patients with stable or unstable angina caused by new stenoses of native coronary arteries no longer than {lesion} mm, in vessels of {dmin} mm to {dmax} mm reference diameter",
                "the enlargement of the coronary lumen in symptomatic patients, diabetic patients included, whose heart disease is caused by previously untreated lesions of native coronary arteries up to {lesion} mm long in vessels {dmin} mm to {dmax} mm wide"],
        "extra": ["The stent is coated with a thin polymer layer that releases {drug} over approximately {days} days.",
                  "The stent is premounted on a rapid exchange delivery system with a semi-compliant balloon.",
                  "The system is supplied in diameters of {dmin} mm to {dmax} mm and lengths of 8 mm to {lesion} mm.",
                  "Use in patients presenting with an acute myocardial infarction less than 12 hours after the start of symptoms is also approved.",
                  "Patients should receive dual antiplatelet therapy as described in the labeling."],
    },
    "stent_frame": {
        "fills": {"lesion": ["18", "23", "28"], "dmin": ["2.50", "2.75"], "dmax": ["4.00", "4.50"]},
        "ind": ["improving the coronary lumen in patients with angina or ischemia caused by short new or recurrent lesions of native coronary arteries measuring {dmin} mm to {dmax} mm in reference diameter"],
        "extra": ["The device is also indicated for the treatment of abrupt or threatened vessel closure in patients with failed interventional treatment.",
                  "The stent is laser cut from a metal alloy tube and premounted on a balloon delivery catheter.",
                  "The stent is available in lengths of 8 mm to {lesion} mm.",
                  "The bare metal stent carries no drug or polymer coating."],
    },
    "ptca": {
        "fills": {},
        "ind": ["dilating a narrowed segment of a coronary artery or of a coronary bypass graft in order to improve blood flow to the myocardium"],
        "extra": ["The PTCA catheter is also indicated for post-delivery expansion of balloon expandable stents.",
                  "The catheter has a hydrophilic coating on the distal shaft and two radiopaque markers within the balloon.",
                  "Balloon diameters range from 1.5 mm to 4.0 mm with lengths from 8 mm to 30 mm.",
                  "The rapid exchange design is compatible with 0.014 inch guidewires."],
    },
    "pacemaker": {
        "fills": {},
        "ind": ["patients who may benefit from rate-adaptive pacing and for the treatment of symptomatic bradycardia due to sinus node dysfunction or atrioventricular block",
                "the restoration of heart rate in patients with chronotropic incompetence, sick sinus syndrome or second- and third-degree AV block"],
        "extra": ["Dual-chamber and atrial tracking modes are intended for patients in whom keeping atrioventricular synchrony is beneficial.",
                  "The pacemaker uses an accelerometer-based activity sensor to adjust the pacing rate.",
                  "The system includes the pulse generator, programmer software and a remote monitoring transmitter.",
                  "The device is MR conditional when used with compatible leads."],
    },
    "crt": {
        "fills": {},
        "ind": ["reducing heart failure symptoms in patients in NYHA Class III or IV despite optimal drug therapy who have a left ventricular ejection fraction no greater than 35% and a QRS width of at least 120 ms"],
        "extra": ["The CRT-P pacemaker provides biventricular pacing through independently programmable left and right ventricular outputs.",
                  "The device also provides rate-adaptive bradycardia pacing.",
                  "The left ventricular lead is placed through the coronary sinus into a cardiac vein."],
    },
    "icd": {
        "fills": {},
        "ind": ["the automatic detection and termination of life-threatening ventricular tachyarrhythmias by antitachycardia pacing, cardioversion and defibrillation shocks"],
        "extra": ["The implantable cardioverter defibrillator also provides bradycardia pacing.",
                  "The system consists of the pulse generator, a transvenous defibrillation lead and the clinician programmer.",
                  "Stored electrograms allow the physician to review detected episodes.",
                  "The device should not be implanted in patients whose ventricular tachyarrhythmias have reversible causes."],
    },
    "pacing_lead": {
        "fills": {},
        "ind": ["permanent sensing and pacing in the right atrium or the right ventricle together with a compatible pulse generator"],
        "extra": ["The lead has an extendable and retractable helix for active fixation in the endocardium.",
                  "The electrode tip elutes a steroid to reduce inflammation and chronic pacing thresholds.",
                  "The bipolar lead has an IS-1 connector and silicone and polyurethane insulation.",
                  "The lead is available in lengths of 45 cm to 65 cm."],
    },
    "defib_lead": {
        "fills": {},
        "ind": ["pacing, sensing and delivery of cardioversion and defibrillation shocks when used with a compatible implantable cardioverter defibrillator"],
        "extra": ["The lead has a distal shocking coil in the right ventricle and an optional proximal coil in the superior vena cava.",
                  "The DF-4 connector combines the high-voltage and pace/sense connections in a single terminal pin.",
                  "A steroid-eluting electrode is fixed by a retractable helix."],
    },
    "aaa_graft": {
        "fills": {"neck": ["10", "15"]},
        "ind": ["endovascular repair of infrarenal abdominal aortic aneurysms in patients whose iliac or femoral arteries allow access and whose aortic neck is at least {neck} mm long and 18 mm to 32 mm wide"],
        "extra": ["The stent graft consists of a bifurcated main body, contralateral and ipsilateral iliac limbs and optional extensions.",
                  "The graft material is woven polyester supported by self-expanding nitinol stents.",
                  "Suprarenal fixation barbs anchor the proximal end of the graft to the aortic wall.",
                  "The delivery system has a low-profile hydrophilic sheath of 14 to 18 French."],
    },
    "iliac_branch": {
        "fills": {},
        "ind": ["the endovascular treatment of patients with common iliac artery aneurysms or aortoiliac aneurysms when preservation of flow to the internal iliac artery is required"],
        "extra": ["The iliac branch component is used together with a bifurcated abdominal stent graft.",
                  "A covered bridging stent connects the side branch to the internal iliac artery."],
    },
    "tevar": {
        "fills": {},
        "ind": ["the endovascular repair of isolated lesions of the descending thoracic aorta, including fusiform aneurysms and saccular aneurysms or penetrating atherosclerotic ulcers, in patients with adequate iliac or femoral access"],
        "extra": ["The thoracic stent graft is available in diameters of 22 mm to 46 mm.",
                  "A proximal bare stent and a flexible graft body allow conformance to the aortic arch.",
                  "The graft is made of expanded polytetrafluoroethylene supported by nitinol rings."],
    },
    "tavr": {
        "fills": {},
        "ind": ["treating patients with symptoms from severe calcific stenosis of the native aortic valve when a heart team that includes a cardiac surgeon considers TAVR appropriate"],
        "extra": ["The valve consists of bovine pericardial leaflets sewn within a balloon-expandable cobalt chromium frame with an outer sealing skirt.",
                  "The valve is delivered by a transfemoral delivery catheter and expanded by a balloon.",
                  "The TAVR system is available in 20, 23, 26 and 29 mm sizes.",
                  "Patients at intermediate or high risk for open surgical therapy were studied."],
    },
    "surgical_valve": {
        "fills": {},
        "ind": ["the replacement of a diseased, damaged or malfunctioning native or prosthetic aortic valve"],
        "extra": ["The bioprosthesis consists of porcine aortic leaflets mounted on a flexible stent covered with polyester cloth.",
                  "The tissue is treated with an anticalcification process and stored in a buffered glutaraldehyde solution.",
                  "The valve is available in sizes of 19 mm to 29 mm."],
    },
    "mech_valve": {
        "fills": {},
        "ind": ["the replacement of a diseased, damaged or malfunctioning native or prosthetic aortic or mitral heart valve"],
        "extra": ["The valve has two pyrolytic carbon leaflets within a titanium housing.",
                  "A rotatable sewing cuff facilitates orientation during implantation."],
    },
    "rf_ablation": {
        "fills": {},
        "ind": ["treating recurrent, symptomatic paroxysmal atrial fibrillation that does not respond to drugs, and for electrophysiological mapping of the heart together with a compatible radiofrequency generator and mapping system",
                "the treatment of typical atrial flutter by radiofrequency ablation of the cavotricuspid isthmus"],
        "extra": ["The catheter has a 3.5 mm irrigated tip electrode and three ring electrodes.",
                  "Saline is delivered through the tip to cool the electrode-tissue interface during ablation.",
                  "A contact force sensor in the distal tip reports the force applied to the tissue.",
                  "The handle has a knob that deflects the distal section."],
    },
    "cryo": {
        "fills": {},
        "ind": ["isolating the pulmonary veins by cryoablation in patients whose recurrent, symptomatic paroxysmal atrial fibrillation persists despite antiarrhythmic drugs"],
        "extra": ["The balloon catheter is cooled by nitrous oxide delivered from the console.",
                  "The system consists of the cryoablation balloon catheter, a sheath, a circular mapping catheter and the console.",
                  "Balloon diameters of 23 mm and 28 mm are available."],
    },
    "mapping": {
        "fills": {},
        "ind": ["recording intracardiac electrograms and pacing during electrophysiology studies, and for creating three-dimensional electroanatomic maps when used with a compatible mapping system"],
        "extra": ["The catheter has twenty electrodes arranged on five flexible splines.",
                  "Electrode spacing of 2 mm supports high-density mapping.",
                  "The catheter is not intended for ablation."],
    },
    "septal_occluder": {
        "fills": {},
        "ind": ["the percutaneous transcatheter closure of secundum atrial septal defects in patients with evidence of right ventricular volume overload or paradoxical embolism"],
        "extra": ["The occluder consists of two self-expanding nitinol wire mesh discs joined by a short waist and filled with polyester fabric.",
                  "The occluder is delivered through a 9 to 12 French delivery sheath and can be recaptured before release.",
                  "Device sizes from 4 mm to 38 mm are available."],
    },
    "laa": {
        "fills": {},
        "ind": ["lowering the risk of thromboembolism originating in the left atrial appendage in non-valvular atrial fibrillation patients who have an elevated stroke risk and a reason to avoid long-term oral anticoagulation"],
        "extra": ["The occluder has a self-expanding nitinol frame with fixation anchors and a permeable polyester membrane facing the left atrium.",
                  "The device is delivered through a transseptal access sheath.",
                  "Patients should be treated with anticoagulation until seal of the appendage is confirmed."],
    },
    "closure": {
        "fills": {},
        "ind": ["sealing femoral artery punctures and shortening the time to hemostasis and to ambulation after diagnostic or interventional catheterization through 5 to 8 French sheaths"],
        "extra": ["The device deploys an intra-arterial bioabsorbable anchor and an extravascular collagen plug.",
                  "All components are resorbed within approximately 90 days.",
                  "The closure device is delivered through the existing procedural sheath."],
    },
    "sfa_stent": {
        "fills": {"slesion": ["140", "180", "240"]},
        "ind": ["improving the lumen of the native superficial femoral and proximal popliteal arteries in patients with symptomatic new or recurrent lesions up to {slesion} mm long and reference diameters of 4.0 mm to 7.0 mm"],
        "extra": ["The stent is a self-expanding nitinol stent premounted on a 6 French delivery system.",
                  "Radiopaque tantalum markers are located at each end of the stent.",
                  "The stent is available in lengths of 20 mm to 200 mm."],
    },
    "dcb": {
        "fills": {"dlesion": ["150", "180"]},
        "ind": ["PTA of new or restenotic lesions of the native superficial femoral or popliteal arteries up to {dlesion} mm long and 4 mm to 6 mm in diameter, after the vessel has been prepared"],
        "extra": ["The balloon is coated with paclitaxel and a water-soluble excipient at a dose of 2 micrograms per square millimeter.",
                  "The catheter is compatible with 0.035 inch guidewires.",
                  "The drug-coated balloon is intended for single use."],
    },
}

DEVICE_OPENERS = ["Approval for the {trade}.", "Approval for the {trade} and accessories.", "{trade}."]
DEVICE_IND = ["The device is indicated for {ind}.", "This device is indicated for {ind}.", "The {short} is indicated for {ind}."]


@dataclass
class Device:
    fda_id: str
    company: str
    trade: str
    short: str
    generic: str
    code: str
    decided: date
    block: str
    length: tuple[int, int]
    upper: bool = False
    note: str = ""
    signals: str = ""
    malformed: bool = False
    fixed: dict[str, str] = field(default_factory=dict)
    more: tuple[str, ...] = ()
    text: str = ""


DEVICES: list[Device] = [
    Device("P909001", "HV", "Aurora Sirolimus-Eluting Coronary Stent System", "Aurora stent",
           "Coronary Drug-Eluting Stent", "NIQ", date(2012, 5, 14), "des", (650, 1000),
           fixed={"drug": "sirolimus"}, signals="a c d f h", note="coating family shared with P909004; frame patents shared with P909002"),
    Device("P909002", "HV", "Strata Coronary Stent System", "Strata stent", "Stent, Coronary", "MAF",
           date(2008, 9, 22), "stent_frame", (300, 520), signals="a c d h",
           note="device says 'stent'; gold titles say 'balloon-expandable cobalt chromium stent'"),
    Device("P909003", "HV", "Tidal PTCA Balloon Dilatation Catheter", "Tidal catheter",
           "Catheter, Transluminal Coronary Angioplasty, Percutaneous", "LOX", date(2010, 3, 2), "ptca", (330, 560),
           signals="a c e h", note="device says PTCA; gold patents say percutaneous transluminal coronary angioplasty"),
    Device("P909004", "HV", "Aurora XT Sirolimus-Eluting Coronary Stent System", "Aurora XT stent",
           "Coronary Drug-Eluting Stent", "NIQ", date(2016, 10, 3), "des", (1000, 1200),
           fixed={"drug": "sirolimus"},
           more=("The Aurora XT stent has thinner struts and a lower crossing profile than the earlier Aurora stent.",
                 "Approval is supported by a prospective, multicenter, single-arm study of 1,050 patients with clinical follow-up to one year.",
                 "The stent may be used in patients with multivessel disease when each lesion meets the stated criteria."),
           signals="a c f h", note="second generation; shares the coating continuation family with P909001"),
    Device("P909005", "CR", "Vireo DR Pacing System", "Vireo DR pacemaker", "Implantable Pacemaker Pulse Generator",
           "DXY", date(2009, 11, 18), "pacemaker", (420, 800), signals="a c h"),
    Device("P909006", "CR", "Bastion VR Implantable Cardioverter Defibrillator", "Bastion VR",
           "Implantable Cardioverter Defibrillator (Non-CRT)", "LWS", date(2011, 6, 27), "icd", (400, 760),
           signals="a c e f h", note="device spells out implantable cardioverter defibrillator; three gold patents say only ICD"),
    Device("P909007", "CR", "Concordia CRT-P Pulse Generator", "Concordia CRT-P",
           "Pacemaker, Implantable, Cardiac Resynchronization (CRT-P)", "NKE",
           date(2014, 2, 10), "crt", (380, 700), signals="a c h", note="one pacing patent shared with P909005"),
    Device("P909008", "CR", "SureFix Bipolar Pacing Lead Model 4150", "SureFix lead", "Permanent Pacemaker Electrode",
           "DTB", date(2010, 8, 9), "pacing_lead", (300, 620), signals="a c h"),
    Device("P909009", "CR", "Tandem DF-4 Defibrillation Lead", "Tandem lead", "Permanent Defibrillator Electrodes",
           "NVY", date(2013, 4, 22), "defib_lead", (260, 520), upper=True, signals="a c h",
           note="statement in upper case, as in older FDA records"),
    Device("P909010", "AM", "Keystone Abdominal Stent Graft System", "Keystone stent graft",
           "Endovascular Graft System, Aortic Aneurysm Treatment", "MIH", date(2011, 9, 12), "aaa_graft", (700, 1100),
           more=("The main body is available in proximal diameters of 23 mm to 36 mm.",
                 "Clinical data were obtained from a prospective study with follow-up to five years."),
           signals="a c f h"),
    Device("P909011", "AM", "Arcus Thoracic Endograft", "Arcus endograft", "Endovascular Graft, Thoracic Aorta", "MIH",
           date(2015, 7, 6), "tevar", (300, 560), signals="a c h"),
    Device("P909012", "VT", "Solace Transcatheter Heart Valve", "Solace valve",
           "Aortic Valve, Prosthesis, Percutaneously Delivered", "NPT", date(2016, 8, 18), "tavr", (900, 1200),
           more=("The system includes the valve, a balloon delivery catheter, a crimping tool and an expandable introducer sheath.",
                 "Approval is based on a randomized trial comparing the device with surgical aortic valve replacement in patients at high operative risk.",
                 "The device is contraindicated in patients who cannot tolerate anticoagulation or antiplatelet therapy or who have active endocarditis."),
           signals="a c e f h", note="device says TAVR; gold patents spell out transcatheter aortic valve replacement; one joint assignee"),
    Device("P909013", "VT", "Perenna Pericardial Aortic Bioprosthesis", "Perenna bioprosthesis",
           "Replacement Heart-Valve", "LWR", date(2010, 1, 25), "surgical_valve", (220, 480), signals="a c h"),
    Device("P909014", "VT", "Solace Evo Transcatheter Heart Valve", "Solace Evo valve",
           "Aortic Valve, Prosthesis, Percutaneously Delivered", "NPT", date(2020, 12, 14), "tavr", (450, 800),
           signals="a c f h", note="shares the frame continuation family with P909012"),
    Device("P909015", "NE", "FlexTip Irrigated RF Catheter", "FlexTip catheter",
           "Catheter, Percutaneous, Cardiac Ablation", "LPB", date(2013, 3, 11), "rf_ablation", (400, 800),
           signals="a c d f h", note="device says 'catheter'; gold titles say 'bi-directional steerable ablation catheter'; one joint assignee"),
    Device("P909016", "NE", "Frostline Cryoablation Balloon Catheter", "Frostline catheter",
           "Catheter, Cardiac Ablation, Atrial Fibrillation", "OAD",
           date(2018, 5, 29), "cryo", (380, 700), signals="a c h"),
    Device("P909017", "NE", "Atlas Diagnostic Mapping Catheter", "Atlas catheter",
           "Catheter, Electrode Recording", "DRF", date(2012, 10, 15), "mapping", (250, 520), signals="a c h"),
    Device("P909018", "PW", "Septra Septal Occluder", "Septra occluder", "Occluder, Transcatheter Septal", "MLV",
           date(2014, 8, 19), "septal_occluder", (300, 620), signals="a b c h",
           note="acquired company's own device, approved before the acquisition closed"),
    Device("P909019", "MC", "Sentinel Left Atrial Appendage Occluder", "Sentinel occluder",
           "Implant, Left Atrial Appendage", "NGV", date(2019, 11, 5), "laa", (800, 1150), signals="a b c h",
           more=("The occluder is available in five sizes from 20 mm to 35 mm.",
                 "The delivery system consists of a double-curve access sheath and a delivery catheter with a threaded connection to the occluder.",
                 "The device may be recaptured and redeployed before release."),
           note="acquirer's device after the close: 4 gold patents assigned to Pulsewave Medical, 4 to Meridian Cardiac"),
    Device("P909020", "MC", "SealPoint Vascular Closure Device", "SealPoint device", "Device, Hemostasis, Vascular",
           "MGB", date(2012, 6, 4), "closure", (260, 560), signals="a h",
           note="acquirer's device before the close: Pulsewave patents must not count as same company"),
    Device("P909021", "SE", "Veloxa Self-Expanding Nitinol Stent System", "Veloxa stent",
           "Stent, Superficial Femoral Artery", "NIP", date(2013, 12, 2), "sfa_stent", (300, 620), signals="a c h"),
    Device("P909022", "SE", "Lumora Paclitaxel-Coated PTA Balloon Catheter", "Lumora balloon",
           "Catheter, Angioplasty, Peripheral, Drug-Coated", "ONU", date(2017, 9, 25), "dcb", (300, 600),
           signals="a c e h", note="device says PTA; gold patents spell out percutaneous transluminal angioplasty"),
    # ---- no gold links at all ----
    Device("P909023", "CV", "Tenor Everolimus-Eluting Coronary Stent System", "Tenor stent",
           "Coronary Drug-Eluting Stent", "NIQ", date(2006, 4, 17), "des", (400, 700), signals="g h",
           fixed={"drug": "everolimus"},
           note="company has no patents; Helix DES patents are same-topic distractors"),
    Device("P909024", "CV", "Cadence SR Pacemaker", "Cadence SR", "Implantable Pacemaker Pulse Generator", "DXY",
           date(2003, 7, 8), "pacemaker", (150, 300), upper=True, signals="g h"),
    Device("P909025", "CV", "Aegis VR ICD", "Aegis VR", "Implantable Cardioverter Defibrillator (Non-CRT)", "LWS",
           date(2005, 2, 14), "icd", (250, 450), signals="g h"),
    Device("P909026", "CV", "Corvessa Bileaflet Mechanical Heart Valve", "bileaflet valve", "Heart-Valve, Mechanical",
           "LWQ", date(2001, 10, 30), "mech_valve", (150, 320), upper=True, signals="g"),
    Device("P909027", "CV", "Pathway RF Ablation Catheter", "Pathway catheter", "Catheter, Percutaneous, Cardiac Ablation",
           "LPB", date(2004, 12, 6), "rf_ablation", (220, 420), signals="g h"),
    Device("P909028", "CV", "Endurix AAA Endograft System", "Endurix endograft",
           "Endovascular Graft System, Aortic Aneurysm Treatment", "MIH", date(2007, 3, 19), "aaa_graft", (260, 520),
           signals="g h"),
    Device("P909029", "AM", "Keystone Iliac Branch Endoprosthesis", "Keystone iliac branch",
           "Endovascular Graft System, Aortic Aneurysm Treatment", "MIH", date(2021, 6, 21), "iliac_branch",
           (200, 450), signals="g h",
           note="same company and topic as P909010 but no gold: its patents are not in the corpus"),
    # ---- malformed on purpose ----
    Device("P909030", "SE", "Iliaca Balloon-Expandable Iliac Stent System", "Iliaca stent", "Stent, Iliac", "NIO",
           date(2019, 2, 11), "sfa_stent", (200, 400), malformed=True, signals="i",
           note="record has no `text` key: must be quarantined as 'missing text'"),
]

# --------------------------------------------------------------------------------------------
# Patent plan. Each batch: topic, owner(s), count, gold devices, options.
#   window: filing-date window (years) when there is no gold device; for gold batches the
#           filing date is drawn relative to the first gold device's decision date unless given.
#   force:  slot values fixed for the first `force_n` patents of the batch (signal control).
#   family: the first `family` patents form one continuation family (near-duplicates).
# --------------------------------------------------------------------------------------------


@dataclass
class Batch:
    topic: str
    owner: str  # company key, or "A+B" for a joint patent
    n: int
    gold: tuple[str, ...] = ()
    family: int = 0
    force: dict[str, str] = field(default_factory=dict)
    force_n: int = 0
    filing: tuple[date, date] | None = None
    window: tuple[int, int] = (2004, 2021)
    tag: str = ""


D = date
PLAN: list[Batch] = [
    # ---- gold: Helix Vascular ----
    Batch("des", "HV", 3, ("P909001", "P909004"), family=3, force={"subject": "drug-eluting stent"}, force_n=3,
          filing=(D(2008, 1, 1), D(2011, 6, 30)), tag="DES coating continuation family"),
    Batch("des", "HV", 5, ("P909001",)),
    Batch("stent_frame", "HV", 2, ("P909001", "P909002"), force={"subject": "balloon-expandable cobalt chromium stent"},
          force_n=1, filing=(D(2004, 1, 1), D(2007, 6, 30))),
    Batch("stent_frame", "HV", 3, ("P909002",), force={"subject": "balloon-expandable cobalt chromium stent"}, force_n=2),
    Batch("des", "HV", 2, ("P909004",), family=2, tag="second-generation DES continuation pair"),
    Batch("des", "HV", 2, ("P909004",)),
    Batch("ptca", "HV", 6, ("P909003",), force={"proc": "percutaneous transluminal coronary angioplasty"}, force_n=4),
    # ---- gold: Cardion Rhythm Systems ----
    Batch("pacemaker", "CR", 6, ("P909005",)),
    Batch("pacemaker", "CR", 1, ("P909005", "P909007")),
    Batch("crt", "CR", 4, ("P909007",)),
    Batch("icd", "CR", 2, ("P909006",), family=2, force={"subject": "implantable cardioverter-defibrillator"}, force_n=2,
          tag="ICD continuation pair"),
    Batch("icd", "CR", 7, ("P909006",), force={"subject": "ICD"}, force_n=3),
    Batch("pacing_lead", "CR", 5, ("P909008",)),
    Batch("pacing_lead", "CR", 1, ("P909008", "P909009")),
    Batch("defib_lead", "CR", 3, ("P909009",)),
    # ---- gold: Aortica Medical ----
    Batch("aaa_graft", "AM", 2, ("P909010",), family=2, tag="AAA stent graft continuation pair"),
    Batch("aaa_graft", "AM", 7, ("P909010",)),
    Batch("aaa_graft", "AM", 1, ("P909010", "P909011")),
    Batch("tevar", "AM", 4, ("P909011",)),
    # ---- gold: Valvion Therapeutics ----
    Batch("tavr", "VT", 3, ("P909012", "P909014"), family=3,
          force={"proc": "transcatheter aortic valve replacement"}, force_n=3,
          filing=(D(2012, 1, 1), D(2015, 3, 31)), tag="TAVR frame continuation family"),
    Batch("tavr", "VT", 7, ("P909012",), force={"proc": "transcatheter aortic valve replacement"}, force_n=3),
    Batch("tavr", "VT+WI", 1, ("P909012",), tag="joint assignee"),
    Batch("tavr", "VT", 4, ("P909014",)),
    Batch("surgical_valve", "VT", 5, ("P909013",)),
    # ---- gold: Nordic Electrophysiology ----
    Batch("rf_ablation", "NE", 2, ("P909015",), family=2,
          force={"subject": "bi-directional steerable ablation catheter"}, force_n=2,
          tag="steerable ablation catheter continuation pair"),
    Batch("rf_ablation", "NE", 7, ("P909015",), force={"subject": "bi-directional steerable ablation catheter"},
          force_n=2),
    Batch("rf_ablation", "NE+WI", 1, ("P909015",), tag="joint assignee"),
    Batch("cryo", "NE", 6, ("P909016",)),
    Batch("mapping", "NE", 4, ("P909017",)),
    Batch("mapping", "NE", 1, ("P909017", "P909015")),
    # ---- gold: the acquisition (Meridian Cardiac acquired Pulsewave Medical on 2017-03-31) ----
    Batch("septal_occluder", "PW", 5, ("P909018",), filing=(D(2009, 1, 1), D(2013, 6, 30))),
    Batch("laa", "PW", 4, ("P909019",), filing=(D(2012, 1, 1), D(2016, 10, 31)),
          tag="acquired company's patents, gold for the acquirer's later device"),
    Batch("laa", "MC", 4, ("P909019",), filing=(D(2017, 6, 1), D(2019, 3, 31))),
    Batch("closure", "MC", 5, ("P909020",)),
    # ---- gold: Stratum Endovascular ----
    Batch("sfa_stent", "SE", 6, ("P909021",)),
    Batch("dcb", "SE", 5, ("P909022",), force={"proc": "percutaneous transluminal angioplasty"}, force_n=3),

    # ---- distractors: same company, other device families ----
    Batch("guidewire", "HV", 4), Batch("guidewire", "HV+OS", 1, tag="joint assignee"),
    Batch("atherectomy", "HV", 3), Batch("embolic_filter", "HV", 4), Batch("sfa_stent", "HV", 2),
    Batch("ivus", "HV", 2), Batch("ptca", "HV", 2, window=(2016, 2021)),
    Batch("leadless", "CR", 6), Batch("monitor", "CR", 7), Batch("icd", "CR", 1, window=(2018, 2021)),
    Batch("vascular_graft", "AM", 2, family=2, tag="distractor continuation pair"),
    Batch("vascular_graft", "AM", 3), Batch("sheath", "AM", 4),
    Batch("mitral_repair", "VT", 6), Batch("sheath", "VT", 2), Batch("surgical_valve", "VT", 1, window=(2019, 2021)),
    Batch("ecg_patch", "NE", 4), Batch("rf_generator", "NE", 6), Batch("monitor", "NE", 2),
    Batch("pfo", "PW", 4, window=(2008, 2016)), Batch("closure", "PW", 2, window=(2008, 2015)),
    Batch("septal_occluder", "PW", 1, window=(2014, 2016)),
    Batch("hemostasis_pad", "MC", 4), Batch("sheath", "MC", 3), Batch("septal_occluder", "MC", 1, window=(2018, 2021)),
    Batch("atherectomy", "SE", 4), Batch("thrombectomy", "SE", 3), Batch("ivc_filter", "SE", 3),
    Batch("stent_frame", "SE", 3),

    # ---- distractors: other companies, same device families ----
    Batch("des", "TB", 2, family=2, tag="competitor continuation pair"), Batch("des", "BW", 3), Batch("des", "WI", 1),
    Batch("stent_frame", "OS", 3), Batch("ptca", "OS", 3), Batch("ptca", "BW", 2),
    Batch("pacemaker", "TB", 3), Batch("pacemaker", "WI", 2), Batch("crt", "TB", 3),
    Batch("icd", "TB", 3), Batch("icd", "BW", 2), Batch("pacing_lead", "TB", 2), Batch("pacing_lead", "BW", 2),
    Batch("defib_lead", "TB", 2),
    Batch("aaa_graft", "BW", 3), Batch("aaa_graft", "OS", 2), Batch("tevar", "OS", 3),
    Batch("tavr", "BW", 4), Batch("tavr", "WI", 3), Batch("surgical_valve", "TB", 3),
    Batch("rf_ablation", "BW", 3), Batch("rf_ablation", "OS", 3), Batch("cryo", "TB", 3), Batch("mapping", "WI", 3),
    Batch("septal_occluder", "OS", 3), Batch("laa", "BW", 4), Batch("closure", "OS", 2), Batch("closure", "TB", 2),
    Batch("sfa_stent", "OS", 2), Batch("sfa_stent", "BW", 2), Batch("dcb", "TB", 2), Batch("dcb", "BW", 2),
    Batch("leadless", "BW", 2), Batch("guidewire", "OS", 3), Batch("monitor", "TB", 2), Batch("ivus", "LX", 6),
    Batch("mitral_repair", "BW", 2), Batch("embolic_filter", "OS", 2), Batch("thrombectomy", "BW", 2),
    Batch("des", "BW", 1, window=(2015, 2021)), Batch("tavr", "OS", 2), Batch("laa", "TB", 2), Batch("icd", "WI", 2),
    Batch("aaa_graft", "TB", 2), Batch("rf_ablation", "TB", 2), Batch("cryo", "BW", 2), Batch("sfa_stent", "TB", 2),
    Batch("ptca", "TB", 2), Batch("septal_occluder", "TB", 1), Batch("pacemaker", "BW", 2),
    Batch("monitor", "CR", 2), Batch("ecg_patch", "NE", 1), Batch("thrombectomy", "SE", 1), Batch("guidewire", "HV", 1),
    Batch("mitral_repair", "VT", 1), Batch("hemostasis_pad", "MC", 1),

    # ---- distractors: not cardiovascular ----
    Batch("ortho_spine", "KB", 2, family=2, tag="orthopaedic continuation pair"), Batch("ortho_spine", "KB", 7),
    Batch("ortho_joint", "KB", 6), Batch("bone_screw", "KB", 6), Batch("ortho_spine", "WI", 2),
    Batch("dental_implant", "DD", 2, family=2, tag="dental continuation pair"), Batch("dental_implant", "DD", 6),
    Batch("orthodontic", "DD", 5),
    Batch("ultrasound", "LX", 13), Batch("ct_recon", "LX", 10), Batch("bone_screw", "KB", 2),
    Batch("ortho_joint", "KB", 2), Batch("dental_implant", "DD", 2), Batch("orthodontic", "DD", 1),
]

# Continuation edits: (old, new) phrase swaps applied to a copy of the parent abstract.
CONTINUATION_SWAPS = [
    ("comprises", "includes"), ("includes", "comprises"), ("In some embodiments", "In certain embodiments"),
    ("may be", "can be"), ("is disclosed", "is described"), ("is provided", "is described"),
    ("about", "approximately"), ("so that", "such that"),
]

# --------------------------------------------------------------------------------------------
# Composition helpers
# --------------------------------------------------------------------------------------------

_SLOT = re.compile(r"\{([A-Za-z_]+?)(\d*)\}")


def _article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


def _draw_ctx(rng: random.Random, fills: dict[str, list[str]], force: dict[str, str]) -> dict[str, str]:
    ctx = {name: (force[name] if name in force else rng.choice(options)) for name, options in fills.items()}
    for name, value in force.items():
        ctx.setdefault(name, value)
    if "subject" in ctx:
        ctx["a_subject"] = _article(ctx["subject"])
        ctx["A_subject"] = ctx["a_subject"][0].upper() + ctx["a_subject"][1:]
    return ctx


def _render(template: str, ctx: dict[str, str]) -> str:
    out = _SLOT.sub(lambda m: ctx[m.group(1) + m.group(2)], template)
    return out[0].upper() + out[1:]


def _days(rng: random.Random, lo: date, hi: date) -> date:
    return lo + timedelta(days=rng.randint(0, max(0, (hi - lo).days)))


@dataclass
class Patent:
    pat_id: str
    title: str
    abstract: str
    assignee: str
    grant_date: str
    filing_date: str
    cpc: str
    topic: str
    owners: tuple[str, ...]
    gold: tuple[str, ...]
    family: str = ""
    malformed: str = ""

    @property
    def text(self) -> str:
        return f"{self.title} {self.abstract}"


BOILERPLATE = [
    "Methods of manufacturing and using the {subject} are also disclosed.",
    "Kits comprising the {subject} and instructions for use are also described.",
    "Related systems and methods are also provided.",
    "Other embodiments are described and claimed.",
    "The {subject} may be provided sterile in a single-use package.",
]


def _compose_abstract(rng: random.Random, spec: dict, ctx: dict[str, str], title: str) -> str:
    """Opener + a random subset of body sentences (+ optional boilerplate); title + abstract in [300, 1100]."""
    target = rng.choice([rng.randint(330, 620), rng.randint(560, 900), rng.randint(800, 1090)])
    k = rng.choice([3, 4, 4, 5, 5, 6])
    sentences = [_render(rng.choice(spec["openers"]), ctx)]
    body = [_render(s, ctx) for s in spec["body"]]
    rng.shuffle(body)

    def size(parts: list[str]) -> int:
        return len(title) + 1 + len(" ".join(parts))

    for sentence in body:
        if size(sentences + [sentence]) > 1100:
            continue
        if size(sentences) >= 300 and len(sentences) >= 3 and (len(sentences) > k or size(sentences) > target):
            break
        sentences.append(sentence)
    if rng.random() < 0.35:
        extra = _render(rng.choice(BOILERPLATE), ctx)
        if size(sentences + [extra]) <= 1100:
            sentences.append(extra)
    return " ".join(sentences)


def _continuation(rng: random.Random, parent: Patent, spec: dict, ctx: dict[str, str], k: int) -> tuple[str, str]:
    """A continuation of `parent`: the same abstract with k phrase swaps, plus a boilerplate sentence
    (first continuation) or minus its last sentence (second continuation)."""
    abstract = parent.abstract
    swaps = [sw for sw in CONTINUATION_SWAPS if sw[0] in abstract]
    for old, new in swaps[:k]:
        abstract = abstract.replace(old, new, 1)
    sentences = abstract.split(". ")
    boiler = [_render(b, ctx) for b in BOILERPLATE]
    extra = [b for b in boiler if b not in abstract]
    if k == 1 or len(sentences) < 5:
        last = sentences[-1] if sentences[-1].endswith(".") else sentences[-1] + "."
        base = ". ".join(sentences[:-1]) + "." if last in boiler else abstract
        abstract = base + " " + extra[k % len(extra)]
    else:
        abstract = ". ".join(sentences[:-1]) + "."
    title = parent.title if k == 1 else parent.title + " and method of use"
    return title, abstract


_WORD = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


MAX_SIBLING_JACCARD = 0.7
"""A new (non-continuation) patent is re-drawn while its token Jaccard with an earlier patent on the
same topic reaches this, so that only continuation families are near-duplicates."""


def _assignee(rng: random.Random, owners: tuple[str, ...]) -> str:
    return "; ".join(rng.choice(COMPANIES[o]["variants"]) for o in owners)


def _cpc(rng: random.Random, spec: dict) -> str:
    extra = rng.sample(spec["extra_cpc"], rng.randint(0, min(2, len(spec["extra_cpc"]))))
    return " ".join(spec["cpc"] + extra)


def build_patents(rng: random.Random, devices: dict[str, Device]) -> list[Patent]:
    n_total = sum(b.n for b in PLAN) + 2
    ids = [f"95{n:06d}" for n in sorted(rng.sample(range(1000, 999999), n_total))]
    rng.shuffle(ids)
    patents: list[Patent] = []
    seen: dict[str, list[frozenset[str]]] = {}
    family_no = 0
    for batch in PLAN:
        spec = TOPICS[batch.topic]
        owners = tuple(batch.owner.split("+"))
        parent: Patent | None = None
        parent_ctx: dict[str, str] = {}
        if batch.family:
            family_no += 1
        used_titles: list[str] = []
        for i in range(batch.n):
            force = batch.force if i < batch.force_n else {}
            ctx = _draw_ctx(rng, spec["fills"], force)
            if batch.gold and batch.filing is None:
                decided = devices[batch.gold[0]].decided
                filing = _days(rng, decided - timedelta(days=6 * 365), decided - timedelta(days=200))
            elif batch.filing is not None:
                filing = _days(rng, *batch.filing)
            else:
                filing = _days(rng, date(batch.window[0], 1, 1), date(batch.window[1], 6, 30))
            if batch.family and i < batch.family and parent is not None:
                title, abstract = _continuation(rng, parent, spec, parent_ctx, i)
                filing = max(filing, date.fromisoformat(parent.filing_date) + timedelta(days=300 * i))
            else:
                best: tuple[float, str, str] | None = None
                for _attempt in range(40):
                    options = [t for t in spec["titles"] if _render(t, ctx) not in used_titles] or spec["titles"]
                    t = _render(rng.choice(options), ctx)
                    a = _compose_abstract(rng, spec, ctx, t)
                    tok = _tokens(f"{t} {a}")
                    worst = max((_jaccard(tok, o) for o in seen.get(batch.topic, [])), default=0.0)
                    if best is None or worst < best[0]:
                        best = (worst, t, a)
                    if worst < MAX_SIBLING_JACCARD:
                        break
                    ctx = _draw_ctx(rng, spec["fills"], force)
                _, title, abstract = best
                seen.setdefault(batch.topic, []).append(_tokens(f"{title} {abstract}"))
                if batch.family and i == 0:
                    parent_ctx = ctx
            used_titles.append(title)
            grant = filing + timedelta(days=rng.randint(480, 1400))
            patent = Patent(
                pat_id=ids.pop(), title=title, abstract=abstract, assignee=_assignee(rng, owners),
                grant_date=grant.isoformat(), filing_date=filing.isoformat(), cpc=_cpc(rng, spec),
                topic=batch.topic, owners=owners, gold=batch.gold,
                family=f"F{family_no}" if batch.family and i < batch.family else "")
            if batch.family and i == 0:
                parent = patent
            patents.append(patent)
    # Two deliberately malformed rows (quarantine): an empty pat_id and an impossible grant date.
    for kind, topic_key, owner in (("empty pat_id", "ptca", "OS"), ("unparseable grant_date", "ortho_joint", "KB")):
        spec = TOPICS[topic_key]
        ctx = _draw_ctx(rng, spec["fills"], {})
        title = _render(rng.choice(spec["titles"]), ctx)
        filing = _days(rng, date(2012, 1, 1), date(2016, 12, 31))
        grant = (filing + timedelta(days=900)).isoformat()
        patents.append(Patent(
            pat_id="" if kind == "empty pat_id" else ids.pop(), title=title,
            abstract=_compose_abstract(rng, spec, ctx, title), assignee=_assignee(rng, (owner,)),
            grant_date="2019-13-45" if kind == "unparseable grant_date" else grant, filing_date=filing.isoformat(),
            cpc=_cpc(rng, spec), topic=topic_key, owners=(owner,), gold=(), malformed=kind))
    return patents


def build_devices(rng: random.Random) -> list[Device]:
    """Fresh copies of DEVICES with composed `text` (module state is never mutated)."""
    devices = [replace(d) for d in DEVICES]
    for d in devices:
        block = DEVICE_BLOCKS[d.block]
        ctx = _draw_ctx(rng, block["fills"], d.fixed)
        ctx.update({"trade": d.trade, "short": d.short})
        lo, hi = d.length
        target = rng.randint(lo, hi)
        parts = [_render(rng.choice(DEVICE_OPENERS), ctx)]
        ctx["ind"] = _SLOT.sub(lambda m, ctx=ctx: ctx[m.group(1) + m.group(2)], rng.choice(block["ind"]))
        parts.append(_render(rng.choice(DEVICE_IND), ctx))
        extras = [_render(s, ctx) for s in block["extra"]]
        rng.shuffle(extras)
        extras += list(d.more)
        for sentence in extras:
            if len(d.generic) + 1 + len(" ".join(parts + [sentence])) > min(hi, 1200):
                continue
            if len(d.generic) + 1 + len(" ".join(parts)) >= target:
                break
            parts.append(sentence)
        statement = " ".join(parts)
        if d.upper:
            statement = statement.upper()
        d.text = f"{d.generic} {statement}"
    return devices


def hard_negatives(rng: random.Random, devices: list[Device], patents: list[Patent]) -> list[tuple[str, str]]:
    """About two label-0 pairs per gold pair: alternately (A) a patent of the device's company (or of a
    company it had acquired before the approval) from another device family, and (B) another company's
    patent on the same clinical area. Never a gold pair of that device."""
    family_topics = {
        "des": {"des", "stent_frame"}, "stent_frame": {"stent_frame", "des"}, "ptca": {"ptca"},
        "pacemaker": {"pacemaker", "crt", "leadless"}, "crt": {"crt", "pacemaker"}, "icd": {"icd", "defib_lead"},
        "pacing_lead": {"pacing_lead", "defib_lead"}, "defib_lead": {"defib_lead", "pacing_lead", "icd"},
        "aaa_graft": {"aaa_graft", "tevar"}, "tevar": {"tevar", "aaa_graft"}, "tavr": {"tavr"},
        "surgical_valve": {"surgical_valve", "tavr"}, "rf_ablation": {"rf_ablation", "rf_generator"},
        "cryo": {"cryo", "rf_ablation"}, "mapping": {"mapping"}, "septal_occluder": {"septal_occluder", "pfo"},
        "laa": {"laa"}, "closure": {"closure", "hemostasis_pad"}, "sfa_stent": {"sfa_stent"}, "dcb": {"dcb", "ptca"},
    }
    valid = [p for p in patents if not p.malformed]
    pairs: list[tuple[str, str]] = []
    for d in devices:
        gold = [p for p in valid if d.fda_id in p.gold]
        if not gold:
            continue
        group = {d.company}
        if d.company == ACQUISITION["acquirer"] and d.decided > ACQUISITION["close_date"]:
            group.add(ACQUISITION["acquired"])
        area = TOPICS[d.block]["area"]
        own = family_topics[d.block]
        pool_a = [p.pat_id for p in valid if d.fda_id not in p.gold and set(p.owners) & group and p.topic not in own]
        pool_b = [p.pat_id for p in valid if d.fda_id not in p.gold and not set(p.owners) & group
                  and TOPICS[p.topic]["area"] == area]
        rng.shuffle(pool_a)
        rng.shuffle(pool_b)
        chosen: list[str] = []
        while len(chosen) < 2 * len(gold) and (pool_a or pool_b):
            for pool in (pool_a, pool_b):
                if pool and len(chosen) < 2 * len(gold):
                    chosen.append(pool.pop())
        pairs += [(d.fda_id, pid) for pid in chosen]
    return pairs


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _write_csv(df: pl.DataFrame, path: Path) -> None:
    path.write_text(df.write_csv(line_terminator="\n"), encoding="utf-8")


def build(out_dir: Path) -> dict[str, Path]:
    """Generate the demo corpus into `out_dir`; returns the written files by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    devices = build_devices(rng)
    by_id = {d.fda_id: d for d in devices}
    patents = build_patents(rng, by_id)

    files: dict[str, Path] = {}

    # devices.jsonl
    lines = []
    for d in devices:
        record = {"fda_id": d.fda_id, "applicant": COMPANIES[d.company]["fda"], "trade_name": d.trade,
                  "generic_name": d.generic, "product_code": d.code, "decision_date": d.decided.isoformat()}
        if not d.malformed:
            record["text"] = d.text
        lines.append(json.dumps(record, ensure_ascii=True))
    files["devices"] = out_dir / "devices.jsonl"
    files["devices"].write_text("\n".join(lines) + "\n", encoding="utf-8")

    # patents.csv: ordered by pat_id; the two malformed rows are placed inside the file
    good = sorted((p for p in patents if not p.malformed), key=lambda p: p.pat_id)
    bad = [p for p in patents if p.malformed]
    rows = good[:97] + [bad[0]] + good[97:251] + [bad[1]] + good[251:]
    pdf = pl.DataFrame(
        {"pat_id": [p.pat_id or None for p in rows], "title": [p.title for p in rows], "abstract": [p.abstract for p in rows],
         "assignee": [p.assignee for p in rows], "grant_date": [p.grant_date for p in rows],
         "filing_date": [p.filing_date for p in rows], "cpc_codes": [p.cpc for p in rows]},
        schema={c: pl.String for c in ("pat_id", "title", "abstract", "assignee", "grant_date", "filing_date",
                                       "cpc_codes")})
    files["patents"] = out_dir / "patents.csv"
    _write_csv(pdf, files["patents"])

    # gold_links.csv
    gold = [(d.fda_id, p.pat_id) for d in devices for p in good if d.fda_id in p.gold]
    files["gold_links"] = out_dir / "gold_links.csv"
    _write_csv(pl.DataFrame({"fda_id": [g[0] for g in gold], "pat_id": [g[1] for g in gold]},
                            schema={"fda_id": pl.String, "pat_id": pl.String}), files["gold_links"])

    # labeled_pairs.csv
    negatives = hard_negatives(rng, devices, patents)
    labeled = sorted([(f, p, 1) for f, p in gold] + [(f, p, 0) for f, p in negatives],
                     key=lambda r: (r[0], -r[2], r[1]))
    files["labeled_pairs"] = out_dir / "labeled_pairs.csv"
    _write_csv(pl.DataFrame({"fda_id": [r[0] for r in labeled], "pat_id": [r[1] for r in labeled],
                             "label": [r[2] for r in labeled]},
                            schema={"fda_id": pl.String, "pat_id": pl.String, "label": pl.Int8}),
               files["labeled_pairs"])

    # acquisitions.csv
    files["acquisitions"] = out_dir / "acquisitions.csv"
    _write_csv(pl.DataFrame({
        "acquirer": [canonical_company(COMPANIES[ACQUISITION["acquirer"]]["fda"])],
        "acquired": [canonical_company(COMPANIES[ACQUISITION["acquired"]]["fda"])],
        "close_date": [ACQUISITION["close_date"].isoformat()],
        "source": ["demo corpus (fictional)"]}), files["acquisitions"])

    files["readme"] = out_dir / "README.md"
    files["readme"].write_text(_readme(devices, patents, gold, negatives), encoding="utf-8")
    return files


def _readme(devices: list[Device], patents: list[Patent], gold: list[tuple[str, str]],
            negatives: list[tuple[str, str]]) -> str:
    valid = [p for p in patents if not p.malformed]
    gold_by_device: dict[str, list[str]] = {}
    for f, p in gold:
        gold_by_device.setdefault(f, []).append(p)
    owners_count: dict[str, int] = {}
    for p in valid:
        for o in p.owners:
            owners_count[o] = owners_count.get(o, 0) + 1
    acq, acd = COMPANIES[ACQUISITION["acquirer"]]["fda"], COMPANIES[ACQUISITION["acquired"]]["fda"]
    cross = [(f, p) for f, p in gold if f == "P909019" and
             any(q.pat_id == p and ACQUISITION["acquired"] in q.owners for q in valid)]
    families: dict[str, list[Patent]] = {}
    for p in valid:
        if p.family:
            families.setdefault(p.family, []).append(p)
    joint = [p for p in valid if len(p.owners) > 1]
    bad_rows = [p for p in patents if p.malformed]
    n_cardio = sum(1 for p in valid if TOPICS[p.topic]["cardio"])

    out = [
        "# Demo corpus (synthetic, fictional)",
        "",
        "A small cardiovascular device-to-patent corpus that ships with `meddevkg_core` so the whole",
        "pipeline can run, be tested and be demonstrated without the real benchmark. Every company, trade",
        "name, identifier and sentence is invented; no text was copied from FDA or USPTO records or from",
        "the Bridge-MedDevKG release. Only the *style* (approval-order statements, claim-style abstracts)",
        "and the length statistics of the real benchmark guided the hand-written building blocks.",
        "",
        "Regenerate (deterministic, fixed seed; byte-identical output):",
        "",
        "```",
        "python scripts/build_demo_corpus.py            # writes meddevkg_core/data/demo/",
        "python scripts/build_demo_corpus.py --out DIR  # anywhere else",
        "```",
        "",
        "Do not edit these files by hand: change the building blocks in the script and rebuild",
        "(`tests/core/test_demo_corpus.py` checks the shipped files equal a fresh build).",
        "",
        "## Counts",
        "",
        f"- devices: {len(devices)} records in `devices.jsonl` ({sum(not d.malformed for d in devices)} valid + "
        f"{sum(d.malformed for d in devices)} malformed); {len(gold_by_device)} devices have gold links, "
        f"{sum(1 for d in devices if not d.malformed and d.fda_id not in gold_by_device)} valid devices have none",
        f"- patents: {len(patents)} rows in `patents.csv` ({len(valid)} valid + {len(bad_rows)} malformed); "
        f"{len({p for _, p in gold})} distinct gold patents, {n_cardio} cardiovascular, "
        f"{len(valid) - n_cardio} non-cardiovascular distractors (orthopaedic, dental, imaging)",
        f"- gold pairs: {len(gold)}; labeled pairs: {len(gold) + len(negatives)} "
        f"({len(gold)} label 1 + {len(negatives)} hard negatives label 0)",
        f"- organisations: {len(CORE_COMPANIES)} core companies (9 with devices, 1 patent-only) + "
        f"{len(COMPANIES) - len(CORE_COMPANIES)} assignee-only organisations",
        "",
        "## Files and formats",
        "",
        "| File | Columns | Notes |",
        "|---|---|---|",
        "| `devices.jsonl` | fda_id, applicant, trade_name, generic_name, product_code, decision_date, text | one JSON object per line; dates `YYYY-MM-DD`; `text` = generic name + approval statement (which names the trade name) |",
        "| `patents.csv` | pat_id, title, abstract, assignee, grant_date, filing_date, cpc_codes | no `text` column: readers build it as title + \" \" + abstract; `cpc_codes` space-separated; joint assignees separated by `\"; \"` |",
        "| `gold_links.csv` | fda_id, pat_id | |",
        "| `labeled_pairs.csv` | fda_id, pat_id, label | label 1 = every gold pair, 0 = hard negatives |",
        "| `acquisitions.csv` | acquirer, acquired, close_date, source | canonical company names |",
        "",
        "Identifiers are in the real formats but outside every range the real registries use, so they",
        "can never collide with real records or with the shared benchmark: PMA numbers `P909001`-`P909030`",
        "(real PMA numbers have a 4-digit yearly sequence that stays far below 9000; the real benchmark does",
        "contain `P900007` and `P900022`, so `P9000xx` was avoided) and 8-digit patent numbers `95xxxxxx`",
        "(real US utility numbers are still below 13 million).",
        "",
        "## Companies",
        "",
        "Canonical key rule (used in `acquisitions.csv`): upper case, `&` -> `AND`, punctuation deleted,",
        f"trailing legal suffixes removed ({', '.join(LEGAL_SUFFIXES)}).",
        "",
        "| Canonical | FDA applicant / main name | Assignee spellings in patents.csv | Devices | Patents |",
        "|---|---|---|---|---|",
    ]
    for key, c in COMPANIES.items():
        n_dev = sum(1 for d in devices if d.company == key)
        spellings = ", ".join(f"`{v}`" for v in c["variants"]) or "(none: no patents)"
        out.append(f"| {canonical_company(c['fda'])} | {c['fda']} | {spellings} | {n_dev} | {owners_count.get(key, 0)} |")
    out += [
        "",
        f"Acquisition: **{acq}** acquired **{acd}**; close date {ACQUISITION['close_date'].isoformat()} "
        "(`acquisitions.csv`).",
        "",
        "## Devices and the signals they exercise",
        "",
        "Signals: (a) same company; (b) acquisition; (c) shared anchor term; (d) head-noun match;",
        "(e) synonym / abbreviation; (f) near-duplicate continuation patents among the gold;",
        "(g) no gold link; (h) distractors (same company other family, other companies same family);",
        "(i) malformed record.",
        "",
        "| fda_id | Applicant | Trade name | Code | Decision | Gold | Signals | Note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in devices:
        out.append(f"| {d.fda_id} | {COMPANIES[d.company]['fda']} | {d.trade} | {d.code} | {d.decided.isoformat()} | "
                   f"{len(gold_by_device.get(d.fda_id, []))} | {d.signals} | {d.note} |")
    out += [
        "",
        "Signal details:",
        "",
        "- (a) Most gold patents are assigned to the device's applicant under a different spelling "
        "(e.g. `Helix Vascular, Inc.` vs `HELIX VASCULAR, INC`), so company matching needs normalisation.",
        f"- (b) {len(cross)} gold pairs of P909019 ({acq}, approved "
        f"{next(d.decided for d in devices if d.fda_id == 'P909019').isoformat()}) point to patents assigned "
        f"only to {acd}; P909018 is {acd}'s own device approved before the close; P909020 is a device of "
        f"{acq} approved before the close, for which {acd} patents are not same-company.",
        "- (c) Anchor terms shared by device and gold patent texts: stent, catheter, valve, pacemaker, "
        "defibrillator, lead, electrode, balloon, occluder, graft.",
        "- (d) P909015 says `catheter`, its gold says `bi-directional steerable ablation catheter`; "
        "P909002 says `stent`, its gold says `balloon-expandable cobalt chromium stent`.",
        "- (e) P909006 spells out `implantable cardioverter defibrillator`, three gold patents say only `ICD`; "
        "P909012 says `TAVR`, gold patents say `transcatheter aortic valve replacement`; P909003 says `PTCA`, "
        "gold patents say `percutaneous transluminal coronary angioplasty`; P909022 says `PTA`, gold patents say "
        "`percutaneous transluminal angioplasty`.",
        "- (g) The six Corvessa devices have no gold (the company has no patents at all) and P909029 has none "
        "although its company has many stent-graft patents.",
        "- (h) Distractors: each company also holds patents on other device families (guidewires, leadless "
        "pacemakers, loop recorders, sheaths, mitral repair, RF generators, PFO occluders, ...); competitors "
        "(Brightwater, Osprey, Tessaly, Westlake) hold patents on every gold device family; Kessler & Brandt "
        "(orthopaedic, CPC A61F2/44xx, A61F2/38, A61B17/86xx), Dentaris (dental, A61C) and most of Lumenix "
        "(ultrasound and CT imaging, A61B8, G06T) are off-topic; Lumenix also holds intravascular imaging "
        "catheter patents (A61B8/12) that share the word `catheter` with the devices. Note the orthopaedic "
        "A61F2 codes and the words `implant` and `bone graft`, which overlap the cardiovascular vocabulary "
        "on purpose.",
        "",
        "Hard negatives in `labeled_pairs.csv` alternate between (A) a patent of the device's company "
        "(including a company it had acquired before the approval) on another device family and (B) another "
        "company's patent in the same clinical area; about two per gold pair.",
        "",
        "## Continuation families (near-duplicate patents)",
        "",
        "| Family | Patents | Assignee | Gold for |",
        "|---|---|---|---|",
    ]
    for name, members in families.items():
        out.append(f"| {name} | {', '.join(p.pat_id for p in members)} | {members[0].assignee} | "
                   f"{', '.join(members[0].gold) or '-'} |")
    out += [
        "",
        "Joint patents (two assignees joined by `; `): "
        + ", ".join(f"{p.pat_id} (`{p.assignee}`)" for p in joint) + ".",
        "",
        "## Malformed rows (quarantine tests)",
        "",
        "The corpus reader must quarantine these, with a reason, and go on:",
        "",
    ]
    for p in bad_rows:
        where = f"pat_id `{p.pat_id}`" if p.pat_id else "pat_id empty"
        out.append(f"- `patents.csv`: {where}, title \"{p.title}\", grant_date `{p.grant_date}` -> {p.malformed}")
    for d in devices:
        if d.malformed:
            out.append(f"- `devices.jsonl`: {d.fda_id} ({d.trade}) has no `text` key -> missing text")
    out += [
        "",
        "None of them appears in `gold_links.csv` or `labeled_pairs.csv`.",
        "",
        "## Product codes",
        "",
        "Real FDA cardiovascular product codes, chosen to fit each fictional device: NIQ (coronary drug-eluting",
        "stent), MAF (coronary stent), LOX (PTCA catheter), DXY (pacemaker pulse generator), NKE (CRT-P), LWS",
        "(ICD), DTB (pacemaker electrode), NVY (defibrillator electrode), MIH (endovascular graft), NPT",
        "(percutaneously delivered aortic valve), LWR (tissue replacement heart valve), LWQ (mechanical heart valve),",
        "LPB / OAD (cardiac ablation catheter / for atrial fibrillation), DRF (electrode recording catheter), MLV",
        "(septal occluder), NGV (left atrial appendage implant), MGB (vascular hemostasis device), NIP (superficial",
        "femoral artery stent), NIO (iliac stent), ONU (drug-coated peripheral angioplasty catheter).",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args()
    files = build(args.out)
    for name, path in files.items():
        print(f"{name:14s} {path}")


if __name__ == "__main__":
    main()
