"""BiAug (reporting bias, bimodal augmentation): the method's pure logic, no Ray, no HTTP.

- :mod:`~xmr.biaug.prompts`: the object-proposal and attribute-decoupling chat prompts;
- :mod:`~xmr.biaug.answers`: strict parsing and validation of the LLM's JSON and CSV answers;
- :mod:`~xmr.biaug.filters`: the §4.1 filters over the detector's boxes for the proposals;
- :mod:`~xmr.biaug.oracle`: exact ToyWorld counterfactuals (an object re-drawn in a named colour);
- :mod:`~xmr.biaug.oracle_chat`: ``--llm oracle``, BiAug's prompts answered from ToyWorld's
  ground truth.

The Ray Data stages that run these over a dataset live in :mod:`xmr.synth`.
"""

from xmr.biaug.answers import (
    AnswerError,
    AttributeRow,
    RejectedRow,
    parse_attribute_rows,
    parse_object_list,
)
from xmr.biaug.filters import DroppedObject, ProposalFilter, VerifiedObject, filter_proposals
from xmr.biaug.oracle import ToyWorldOracle, recolour_toyworld_object, toyworld_class
from xmr.biaug.oracle_chat import ToyWorldOracleChat
from xmr.biaug.prompts import (
    ATTRIBUTE_CATEGORIES,
    ATTRIBUTE_COLUMNS,
    Messages,
    attribute_messages,
    object_proposal_messages,
    read_attribute_messages,
    read_object_proposal_messages,
)

__all__ = [
    "ATTRIBUTE_CATEGORIES",
    "ATTRIBUTE_COLUMNS",
    "AnswerError",
    "AttributeRow",
    "DroppedObject",
    "Messages",
    "ProposalFilter",
    "RejectedRow",
    "ToyWorldOracle",
    "ToyWorldOracleChat",
    "VerifiedObject",
    "attribute_messages",
    "filter_proposals",
    "object_proposal_messages",
    "parse_attribute_rows",
    "parse_object_list",
    "read_attribute_messages",
    "read_object_proposal_messages",
    "recolour_toyworld_object",
    "toyworld_class",
]
