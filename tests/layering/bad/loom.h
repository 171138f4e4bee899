// A tree that breaks each layering rule once, for the layering_catches_violations test.
#pragma once
