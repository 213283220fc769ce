/* api/standin/standin.c - which stand-ins this build links (RP_STANDINS from api.cmake). */
#include "api/standin/standin.h"

#ifndef RP_STANDINS
#define RP_STANDINS ""
#endif

const char *rp_standin_names(void) { return RP_STANDINS; }
